/* mpi_bench: times one MPI operation the way OSU Micro-Benchmarks and
 * goccl's bench/osu do, for goccl's comparison harness (bench/peers).
 *
 * Usage: mpirun -np N mpi_bench OP MINBYTES MAXBYTES ITERS WARMUP [METHOD]
 *   OP: latency (2 ranks) | allreduce | bcast | alltoall | allgather | reduce_scatter |
 *       reduce | gather | scatter
 *   METHOD: osu (the default, below) | b2b
 *
 * Sizes start at MINBYTES and double up to MAXBYTES (0 is followed by 1), as
 * in osu -m MIN:MAX; a size is skipped when it holds no element. Collectives
 * move float32 (MPI_FLOAT, sum, root 0); the size is what osu calls the
 * message size: the buffer of allreduce, bcast and reduce, the block each
 * rank sends to each rank in alltoall, each rank's block in allgather,
 * gather and scatter, and each rank's whole input in reduce_scatter (so
 * each rank receives size/N).
 *
 * Methodology (osu_allreduce.c and siblings, and bench/osu): per size, a
 * barrier, then WARMUP untimed and ITERS timed calls; each call is timed
 * alone and followed by an untimed barrier; a rank's latency is its mean
 * time per call; rank 0 prints the average of the ranks' latencies, their
 * minimum and maximum. latency is osu_latency: rank 0 sends, rank 1 sends
 * back, half the mean round trip, rank 0's clock; no barrier in between.
 * b2b (not OSU's method, goccl's osu --back-to-back): the WARMUP calls,
 * a barrier, then the ITERS calls timed together with no barrier between
 * them, a rank's latency their span over ITERS; latency is the same.
 *
 * Prints on rank 0: '#' header lines, then one row per size:
 *   bytes avg_us min_us max_us
 * Buffers are allocated once, for the largest size, before the first
 * measurement (as OSU does).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum op { LATENCY, ALLREDUCE, BCAST, ALLTOALL, ALLGATHER, REDUCE_SCATTER, REDUCE, GATHER, SCATTER };

static int parse_op(const char *s) {
  static const char *names[] = {"latency", "allreduce", "bcast", "alltoall", "allgather", "reduce_scatter",
                                "reduce", "gather", "scatter"};
  for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
    if (!strcmp(s, names[i])) return i;
  return -1;
}

static size_t next_size(size_t s) { return s ? 2 * s : 1; }

/* layout gives the send and receive lengths (elements) and the block for a size. */
static void layout(int op, size_t bytes, int n, size_t *send, size_t *recv, size_t *block) {
  size_t count = op == LATENCY ? bytes : bytes / sizeof(float);
  *block = op == REDUCE_SCATTER ? count / n : count;
  switch (op) {
  case ALLTOALL: *send = *recv = n * *block; break;
  case ALLGATHER:
  case GATHER: *send = *block; *recv = n * *block; break;
  case REDUCE_SCATTER:
  case SCATTER: *send = n * *block; *recv = *block; break;
  default: *send = *recv = count;
  }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  int op = argc == 6 || argc == 7 ? parse_op(argv[1]) : -1;
  int b2b = argc == 7 && !strcmp(argv[6], "b2b");
  if (op < 0 || (argc == 7 && !b2b && strcmp(argv[6], "osu"))) {
    if (!rank) fprintf(stderr, "usage: mpi_bench latency|allreduce|bcast|alltoall|allgather|reduce_scatter|reduce|gather|scatter MINBYTES MAXBYTES ITERS WARMUP [osu|b2b]\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  size_t minb = strtoull(argv[2], 0, 10), maxb = strtoull(argv[3], 0, 10);
  int iters = atoi(argv[4]), warm = atoi(argv[5]);
  if (iters < 1 || warm < 0 || minb > maxb) {
    if (!rank) fprintf(stderr, "mpi_bench: bad sizes or counts\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  if (op == LATENCY && n != 2) {
    if (!rank) fprintf(stderr, "mpi_bench: latency needs exactly 2 ranks, got %d\n", n);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  size_t maxsend, maxrecv, maxblock;
  layout(op, maxb, n, &maxsend, &maxrecv, &maxblock);
  size_t es = op == LATENCY ? 1 : sizeof(float);
  char *a = malloc(maxsend * es + 1), *b = malloc(maxrecv * es + 1);
  if (!a || !b) {
    fprintf(stderr, "mpi_bench: rank %d: cannot allocate %zu bytes\n", rank, (maxsend + maxrecv) * es);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (size_t i = 0; i < maxsend; i++) {
    if (op == LATENCY) a[i] = 1; else ((float *)a)[i] = 1.0f;
  }
  memset(b, 0, maxrecv * es);
  if (!rank) {
    printf("# mpi_bench %s np=%d iterations=%d warmup=%d timing=%s\n", argv[1], n, iters, warm, b2b ? "b2b" : "osu");
    printf("# %-10s %12s %12s %12s\n", "bytes", "avg_us", "min_us", "max_us");
    fflush(stdout);
  }
  for (size_t bytes = minb; bytes <= maxb; bytes = next_size(bytes)) {
    size_t sendn, recvn, block;
    layout(op, bytes, n, &sendn, &recvn, &block);
    if (block == 0) continue;
    int cnt = (int)block;
    MPI_Barrier(MPI_COMM_WORLD);
    double timer = 0, span0 = 0;
    for (int i = 0; i < warm + iters; i++) {
      if (b2b && i == warm) {
        MPI_Barrier(MPI_COMM_WORLD);
        span0 = MPI_Wtime();
      }
      double t0 = b2b ? 0 : MPI_Wtime(); /* b2b reads the clock around the span only */
      switch (op) {
      case LATENCY:
        if (rank == 0) {
          MPI_Send(a, cnt, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
          MPI_Recv(b, cnt, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
          MPI_Recv(b, cnt, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          MPI_Send(a, cnt, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        }
        break;
      case ALLREDUCE: MPI_Allreduce(a, b, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
      case BCAST: MPI_Bcast(a, cnt, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
      case ALLTOALL: MPI_Alltoall(a, cnt, MPI_FLOAT, b, cnt, MPI_FLOAT, MPI_COMM_WORLD); break;
      case ALLGATHER: MPI_Allgather(a, cnt, MPI_FLOAT, b, cnt, MPI_FLOAT, MPI_COMM_WORLD); break;
      case REDUCE_SCATTER: MPI_Reduce_scatter_block(a, b, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
      case REDUCE: MPI_Reduce(a, b, cnt, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD); break;
      case GATHER: MPI_Gather(a, cnt, MPI_FLOAT, b, cnt, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
      case SCATTER: MPI_Scatter(a, cnt, MPI_FLOAT, b, cnt, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
      }
      if (b2b) continue;
      double d = MPI_Wtime() - t0;
      if (op != LATENCY) MPI_Barrier(MPI_COMM_WORLD);
      if (i >= warm) timer += d;
    }
    if (b2b) timer = MPI_Wtime() - span0;
    double lat = timer * 1e6 / iters, sum, lo, hi;
    if (op == LATENCY) {
      lat /= 2;
      MPI_Bcast(&lat, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD); /* rank 0's clock, as osu_latency */
      sum = lat * n, lo = hi = lat;
    } else {
      MPI_Reduce(&lat, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
      MPI_Reduce(&lat, &lo, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
      MPI_Reduce(&lat, &hi, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    }
    if (!rank) {
      printf("%-12zu %12.2f %12.2f %12.2f\n", bytes, sum / n, lo, hi);
      fflush(stdout);
    }
  }
  free(a);
  free(b);
  MPI_Finalize();
  return 0;
}
