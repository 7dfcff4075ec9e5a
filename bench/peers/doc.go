// Package peers compares goccl with the libraries it competes with, Open
// MPI and Gloo, on the machine at hand, side by side in one run: the
// comparison harness behind the README's performance tables
// (bench/cmd/peers is its command).
//
// # What it runs
//
// goccl's side is an OSU-style command, by default
//
//	bin/gorun -n NP bin/osu OP -m MIN:MAX -i ITERS -x WARMUP -T float32
//
// (any command that prints rows "bytes avg_us ..." will do; gorun's "[r] "
// rank tags are stripped). The peers run small drivers of this package,
// built from drivers/*.c* against Debian's packages (openmpi-bin and
// libopenmpi-dev, libgloo-dev) by Build, which installs the packages when
// they are missing:
//
//   - mpi-tcp: drivers/mpi_bench.c under Open MPI's mpirun with the ob1 PML
//     and the TCP BTL on loopback (--mca pml ob1 --mca btl tcp,self
//     --mca btl_tcp_if_include lo);
//   - mpi-shm: the same with the shared-memory BTL (--mca btl vader,self),
//     what Open MPI uses within a host by default;
//   - gloo-tcp: drivers/gloo_bench.cc, NP processes started directly,
//     meeting through Gloo's file store in a fresh directory, over Gloo's
//     TCP transport on 127.0.0.1; every operation is called as
//     torch.distributed's ProcessGroupGloo calls it (gloo::allreduce,
//     gloo::broadcast, gloo::alltoall, gloo::reduce, ...: unbound
//     buffers) except reduce_scatter, for which torch has no Gloo
//     collective (gloo::ReduceScatterHalvingDoubling); the allreduce can be Gloo's
//     legacy classes instead (-gloo-allreduce ring_chunked, ring,
//     halving_doubling: gloo::AllreduceRingChunked, whose stalls of 70-95
//     ms a call at some sizes of a sweep the README's earlier tables
//     show, and the others). Its barrier speaks the operation's kind of
//     buffer: gloo::barrier (unbound buffers, as torch.distributed's) for
//     the unbound operations, the legacy gloo::BarrierAllToAll for the
//     legacy algorithm classes. Gloo sizes and locks a pair's
//     send buffer at each bound send and never at unbound ones, so after
//     the legacy barrier's tiny messages the unbound ones waited for
//     delayed acknowledgements from 64 KiB on (tens of milliseconds a
//     message; TestGlooLatencyLargeAfterSmall);
//   - floor-tcp: no library but the floor under every TCP column:
//     bench/cmd/tcpfloor (bin/tcpfloor, built with gorun and osu), two
//     bare Go processes doing the loop of latency or bcast (2 ranks, up to
//     1 MiB) over loopback TCP with non-blocking sockets, a spinning
//     read(2) and one write(2) per message, timed the same way (-osu-rows,
//     and -b2b back to back). A goccl row above it is goccl's own work on
//     the call's path; a peer's row below it is a different way of timing
//     or of using the kernel.
//
// Every program runs in each of several rounds, alternating (the order
// rotates from round to round, so none always runs first or right after
// another), and the table shows per size the median over rounds of each
// program's time and the ratio peer_time / goccl_time: above 1, goccl is
// faster. Alternating rounds spread the drift of a shared machine over all
// programs alike; the ratios are what carry over between machines and days.
//
// # Methodology
//
// The drivers time exactly as OSU Micro-Benchmarks (and goccl's bench/osu,
// which follows them) do, so the columns compare like with like:
//
//   - collectives: per size a barrier, WARMUP untimed calls, then ITERS
//     calls, each timed alone and followed by an untimed barrier; a rank's
//     latency is its mean time per call, and the row shows the average over
//     ranks (osu_allreduce's "Avg Latency(us)"); bin/osu also warms up on
//     its first size for 50 ms and on each later size up to 8 KiB for 1 ms
//     (its --warmup-time: a Go process's first milliseconds after Init run
//     slower, and a printed row disturbs the next size), the drivers by
//     count only;
//   - latency: osu_latency's ping-pong between 2 ranks, half the mean round
//     trip on rank 0's clock, no barrier in between (bin/osu's first size
//     warmed up for 50 ms too);
//   - sizes double from MIN to MAX; collectives move float32 and reduce with
//     sum; the rooted operations' root is 0; the size is osu's message
//     size: the buffer of allreduce, bcast and reduce, the block per rank of
//     alltoall, allgather, gather and scatter, the whole input of
//     reduce_scatter (each rank receives size/NP);
//   - buffers are allocated once, before the first size, and reused;
//   - the peers run with MALLOC_MMAP_MAX_=0 and a huge
//     MALLOC_TRIM_THRESHOLD_, so glibc keeps freed memory in the process:
//     Open MPI and Gloo allocate temporaries per call, and on a VM where a
//     freshly faulted MiB costs milliseconds that, not the library, would be
//     measured. goccl (Go) reuses its staging memory anyway.
//
// The host's state: on a shared VM the cache-line round trip between the
// ranks' cores changes every few seconds as the host moves the virtual
// CPUs (see probe.go), and small-message times with it. CompareSteady
// samples it around every run (HostProbe) and runs a round again while its
// samples spread more than SteadySpread, so that the programs of a round
// meet the same machine.
//
// A barrier per call, rather than back-to-back calls, keeps a fast rank from
// running ahead into the next call and hiding skew; it is what OSU users
// expect. Config.Method MethodB2B (bin/peers -method b2b) times every
// program the other way, as nccl-tests and back-to-back drivers do: per
// size the WARMUP calls, a barrier, then the ITERS calls timed together
// with no barrier between them, a rank's latency their span divided by
// ITERS (goccl: osu --back-to-back; the drivers' last argument b2b).
// There a broadcast's root may run calls ahead of its receivers, and
// small broadcasts come out faster than OSU's method gives them; compare
// a back-to-back peer only with goccl timed back to back. latency is the
// same ping-pong either way. The drivers do not check results (bench/osu's
// -c does for goccl).
package peers
