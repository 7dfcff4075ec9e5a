// Package comm is goccl's user-facing API: a Communicator joins the ranks of
// a job (Init reads the environment gorun, torchrun, Slurm or Open MPI set),
// connects a transport to every peer and runs collectives on Go slices,
// blocking or asynchronous.
//
// Buffers: a slice from Alloc (or one passed to Register) is registered with
// the transport once and collectives run directly on it: that is the fast
// path. Any other slice is copied through a registered staging buffer that
// the communicator keeps and reuses, so a steady-state collective allocates
// nothing either way.
//
// Ordering: as in MPI and NCCL, every rank must call the same collectives in
// the same order. Collectives of one communicator run one at a time, in the
// order they were called; an asynchronous call returns a Request at once.
//
// Errors name the collective, its sequence number, the ranks involved and
// the cause. After a failure (a dead peer, a broken link, an abandoned
// collective) the communicator refuses every later call with that cause.
//
// comm wires the layers together: it imports bootstrap, collectives,
// transport and the concrete transports; nothing below imports it.
package comm
