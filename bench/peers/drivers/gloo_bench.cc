// gloo_bench: times one Gloo operation over Gloo's TCP transport the way
// OSU Micro-Benchmarks and goccl's bench/osu do, for goccl's comparison
// harness (bench/peers).
//
// Usage: RANK=r WORLD_SIZE=n GLOO_STORE=DIR gloo_bench OP MINBYTES MAXBYTES ITERS WARMUP [METHOD]
//   OP: latency (2 ranks) | allreduce | bcast | alltoall | allgather | reduce_scatter |
//       reduce | gather | scatter
//   GLOO_STORE: a directory shared by the ranks (gloo::rendezvous::FileStore)
//   GLOO_HOST: the address the ranks listen on (default 127.0.0.1)
//   GLOO_ALLREDUCE: torch (default; gloo::allreduce, as torch.distributed's
//                   ProcessGroupGloo calls it), ring_chunked
//                   (gloo::AllreduceRingChunked), ring, halving_doubling
//   METHOD: osu (the default) | b2b, as in mpi_bench.c
//
// Sizes, element type and methodology are mpi_bench.c's: sizes double from
// MINBYTES to MAXBYTES, float32 sum with root 0, each call timed alone and
// followed by an untimed barrier, rank 0 prints the average of the ranks'
// mean latencies with their minimum and maximum:
//   bytes avg_us min_us max_us
// Every operation is called as torch.distributed's ProcessGroupGloo calls
// it: gloo::broadcast, gloo::alltoall, gloo::allgather, gloo::reduce,
// gloo::gather, gloo::scatter (root 0; the size is the block of a rank for
// the last two, as osu's), latency a ping-pong of unbound buffers (Gloo's
// send/recv); the allreduce is gloo::allreduce unless GLOO_ALLREDUCE names
// a legacy class; reduce_scatter, which torch has no Gloo collective for,
// is gloo::ReduceScatterHalvingDoubling (in place).
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/broadcast.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/scatter.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

const char* envOr(const char* name, const char* def) {
  const char* v = getenv(name);
  return v && *v ? v : def;
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Layout {
  size_t send, recv, block;
};

Layout layout(const std::string& op, size_t bytes, int n) {
  size_t count = op == "latency" ? bytes : bytes / sizeof(float);
  size_t block = op == "reduce_scatter" ? count / n : count;
  if (op == "alltoall") return {n * block, n * block, block};
  if (op == "allgather") return {block, n * block, block};
  if (op == "reduce_scatter") return {n * block, n * block, block};  // in place
  if (op == "gather") return {block, n * block, block};
  if (op == "scatter") return {n * block, block, block};
  return {count, count, block};
}

}  // namespace

int main(int argc, char** argv) {
  static const std::vector<std::string> ops = {"latency", "allreduce", "bcast", "alltoall", "allgather", "reduce_scatter", "reduce", "gather", "scatter"};
  const bool b2b = argc == 7 && std::string(argv[6]) == "b2b";
  if ((argc != 6 && argc != 7) || (argc == 7 && !b2b && std::string(argv[6]) != "osu") ||
      std::find(ops.begin(), ops.end(), argv[1]) == ops.end() || !getenv("RANK") ||
      !getenv("WORLD_SIZE") || !getenv("GLOO_STORE")) {
    fprintf(stderr,
            "usage: RANK=r WORLD_SIZE=n GLOO_STORE=DIR gloo_bench "
            "latency|allreduce|bcast|alltoall|allgather|reduce_scatter|reduce|gather|scatter MINBYTES MAXBYTES ITERS WARMUP [osu|b2b]\n");
    return 2;
  }
  const std::string op = argv[1];
  const size_t minb = strtoull(argv[2], 0, 10), maxb = strtoull(argv[3], 0, 10);
  const int iters = atoi(argv[4]), warm = atoi(argv[5]);
  const int rank = atoi(getenv("RANK")), n = atoi(getenv("WORLD_SIZE"));
  const std::string algo = envOr("GLOO_ALLREDUCE", "torch");
  if (iters < 1 || warm < 0 || minb > maxb || n < 1 || rank < 0 || rank >= n) {
    fprintf(stderr, "gloo_bench: bad sizes, counts or ranks\n");
    return 2;
  }
  if (op == "latency" && n != 2) {
    fprintf(stderr, "gloo_bench: latency needs exactly 2 ranks, got %d\n", n);
    return 2;
  }
  if (algo != "ring_chunked" && algo != "ring" && algo != "halving_doubling" && algo != "torch") {
    fprintf(stderr, "gloo_bench: unknown GLOO_ALLREDUCE %s\n", algo.c_str());
    return 2;
  }

  gloo::transport::tcp::attr attr;
  attr.hostname = envOr("GLOO_HOST", "127.0.0.1");
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore fs(getenv("GLOO_STORE"));
  gloo::rendezvous::PrefixStore ps("gloo_bench", fs);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, n);
  ctx->connectFullMesh(ps, dev);
  // The barrier speaks the operation's kind of buffer. Gloo sizes a
  // pair's SO_SNDBUF to each bound send (locking it against the kernel's
  // tuning) and never for unbound sends: after the legacy
  // gloo::BarrierAllToAll's tiny bound messages, the unbound messages of
  // the ping-pong, gloo::alltoall and gloo::allgather ran with a 4.6 KB
  // send buffer and waited for delayed acknowledgements from 64 KiB on
  // (80 ms a one-way trip at 128 KiB, 0.4 s at 1 MiB; alltoall 2.3 s at
  // 4 MiB). The unbound operations (all but reduce_scatter and the
  // allreduce's legacy choices) take gloo::barrier (unbound,
  // torch.distributed's); the legacy algorithm classes, whose bound sends
  // size the buffer themselves, keep the legacy barrier.
  const bool unbound = op != "reduce_scatter" && (op != "allreduce" || algo == "torch");
  gloo::BarrierAllToAll legacyBarrier(ctx);
  auto barrier = [&]() {
    if (!unbound) {
      legacyBarrier.run();
      return;
    }
    gloo::BarrierOptions o(ctx);
    gloo::barrier(o);
  };

  // The reduction of allreduce and reduce: float32 sum, as torch's.
  const auto sumFloat = static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>);

  const Layout most = layout(op, maxb, n);
  std::vector<float> a(std::max(most.send, size_t(1)), 1.0f), b(std::max(most.recv, size_t(1)), 0.0f);
  std::vector<double> lats(n);
  if (rank == 0) {
    printf("# gloo_bench %s np=%d iterations=%d warmup=%d timing=%s%s%s\n", op.c_str(), n, iters, warm,
           b2b ? "b2b" : "osu", op == "allreduce" ? " allreduce=" : "", op == "allreduce" ? algo.c_str() : "");
    printf("# %-10s %12s %12s %12s\n", "bytes", "avg_us", "min_us", "max_us");
    fflush(stdout);
  }
  for (size_t bytes = minb; bytes <= maxb; bytes = bytes ? 2 * bytes : 1) {
    const Layout l = layout(op, bytes, n);
    if (l.block == 0) continue;
    std::unique_ptr<gloo::Algorithm> alg;
    std::vector<float*> ptrs{a.data()};
    std::unique_ptr<gloo::transport::UnboundBuffer> sbuf, rbuf;
    uint64_t slot = 0;
    // The scatter root's blocks, set once per size (not in the timed call).
    std::vector<float*> blocks;
    if (op == "scatter" && rank == 0) {
      for (int r = 0; r < n; r++) blocks.push_back(a.data() + r * l.block);
    }
    if (op == "allreduce") {
      if (algo == "torch") {
        // gloo::allreduce below, as torch.distributed's ProcessGroupGloo
        // calls it (unbound buffers, in place, Gloo's default ring).
      } else if (algo == "ring") alg.reset(new gloo::AllreduceRing<float>(ctx, ptrs, l.block));
      else if (algo == "halving_doubling") alg.reset(new gloo::AllreduceHalvingDoubling<float>(ctx, ptrs, l.block));
      else alg.reset(new gloo::AllreduceRingChunked<float>(ctx, ptrs, l.block));
    } else if (op == "reduce_scatter") {
      alg.reset(new gloo::ReduceScatterHalvingDoubling<float>(ctx, ptrs, int(l.send), std::vector<int>(n, int(l.block))));
    } else if (op == "latency") {
      sbuf = ctx->createUnboundBuffer(a.data(), bytes);
      rbuf = ctx->createUnboundBuffer(b.data(), bytes);
      slot = ctx->nextSlot();
    }
    auto call = [&]() {
      if (alg) {
        alg->run();
      } else if (op == "allreduce") {  // torch
        gloo::AllreduceOptions o(ctx);
        o.setOutput(a.data(), l.block);
        o.setReduceFunction(sumFloat);
        gloo::allreduce(o);
      } else if (op == "bcast") {
        gloo::BroadcastOptions o(ctx);
        o.setOutput(a.data(), l.block);
        o.setRoot(0);
        gloo::broadcast(o);
      } else if (op == "reduce") {
        gloo::ReduceOptions o(ctx);
        o.setInput(a.data(), l.block);
        o.setOutput(b.data(), l.block);
        o.setRoot(0);
        o.setReduceFunction(sumFloat);
        gloo::reduce(o);
      } else if (op == "gather") {
        gloo::GatherOptions o(ctx);
        o.setInput(a.data(), l.send);
        if (rank == 0) o.setOutput(b.data(), l.recv);
        o.setRoot(0);
        gloo::gather(o);
      } else if (op == "scatter") {
        gloo::ScatterOptions o(ctx);
        if (rank == 0) o.setInputs(blocks, l.block);
        o.setOutput(b.data(), l.recv);
        o.setRoot(0);
        gloo::scatter(o);
      } else if (op == "alltoall") {
        gloo::AlltoallOptions o(ctx);
        o.setInput(a.data(), l.send);
        o.setOutput(b.data(), l.recv);
        gloo::alltoall(o);
      } else if (op == "allgather") {
        gloo::AllgatherOptions o(ctx);
        o.setInput(a.data(), l.send);
        o.setOutput(b.data(), l.recv);
        gloo::allgather(o);
      } else if (rank == 0) {  // latency
        sbuf->send(1, slot);
        sbuf->waitSend();
        rbuf->recv(1, slot);
        rbuf->waitRecv();
      } else {
        rbuf->recv(0, slot);
        rbuf->waitRecv();
        sbuf->send(0, slot);
        sbuf->waitSend();
      }
    };
    barrier();
    double timer = 0, span0 = 0;
    for (int i = 0; i < warm + iters; i++) {
      if (b2b && i == warm) {
        barrier();
        span0 = now();
      }
      if (b2b) {  // the clock is read around the span only
        call();
        continue;
      }
      double t0 = now();
      call();
      double d = now() - t0;
      if (op != "latency") barrier();
      if (i >= warm) timer += d;
    }
    if (b2b) timer = now() - span0;
    double lat = timer * 1e6 / iters;
    if (op == "latency") lat /= 2;
    gloo::AllgatherOptions o(ctx);
    o.setInput(&lat, 1);
    o.setOutput(lats.data(), n);
    gloo::allgather(o);
    if (op == "latency") lats.assign(n, lats[0]);  // rank 0's clock, as osu_latency
    if (rank == 0) {
      double sum = 0, lo = lats[0], hi = lats[0];
      for (double v : lats) sum += v, lo = std::min(lo, v), hi = std::max(hi, v);
      printf("%-12zu %12.2f %12.2f %12.2f\n", bytes, sum / n, lo, hi);
      fflush(stdout);
    }
  }
  return 0;
}
