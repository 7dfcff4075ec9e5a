// Package simulate predicts the time of goccl's collectives at any scale,
// from 2 to 65,536 ranks and beyond, by running the very plans the
// executor runs (collectives.Compile of the registry's schedules) through
// a discrete-event model of the executor, the CPU and the network.
//
// The model (see Params, Link and Machine): ranks on hosts; per link class
// (within a host, between hosts) a latency α, a port bandwidth 1/β, and a
// CPU cost per message o and per byte at each end (LogGP's overhead, which
// matters where the transport copies through the CPU and where ranks
// outnumber cores); a host's NIC shared by its ranks, one queue per
// direction; the CPU's reduction (γ) and copy speeds; cores shared by the
// ranks of a pool; the executor's chunking, its credit-based flow control
// with a fixed number of staging slots per link, and inline sends.
//
// Four methods (Method), chosen per job by Simulate unless forced:
//
//   - Full: every rank, exactly, when the event count fits a budget.
//   - Periodic: for the algorithms whose schedules are the same up to a
//     shift (rings, pairwise exchange, Bruck, dissemination) or an XOR of
//     the rank (recursive doubling and halving on a power of two), on alike
//     hosts a window of W ranks (a multiple of the ranks per host) stands
//     for the job: a rank's peer t is simulated by rank t mod W, the link's
//     class and the NICs it crosses come from the true pair. It is exact
//     where the buffer cuts evenly, which the package's tests check against
//     Full.
//   - Extrapolated: for large calls that do not fit, two smaller sizes
//     (the second twice the first, both in the pipeline's steady state) and
//     the line through them.
//   - Analytic: the registry's α-β-γ cost (collectives.Algo.Time), labelled
//     as such, where none of the above applies (a linear number of steps on
//     every rank of a job too large to simulate, such as the
//     scatter-allgather broadcast on 65,536 ranks).
//
// The package never touches a network: Simulate is a pure function of the
// job, the machine and the parameters.
package simulate
