// Package comm is goccl's user-facing API: a Communicator joins the ranks of
// a job (Init reads the environment gorun, torchrun, Slurm or Open MPI set),
// connects a transport to each peer when a collective first needs it, and
// runs collectives on Go slices, blocking or asynchronous.
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
// the cause. A failure fails the call on every rank, fast, naming the same
// rank at its root: the rank that fails tells every connected peer why over
// the data links before it closes them (so survivors agree also when the bootstrap
// store died with its host) and publishes details in the store. Ranks that
// disagree on a call (collective, count, type, operation, root, or how
// many collectives they made) fail in that call with an error naming both
// calls, the differing rank first; a rank that refuses its own arguments
// breaks the communicator on every rank. A stalled collective compares its
// call with those of the ranks it waits on after a second without progress,
// and at the stall timeout blames the rank at the end of the chain of waits
// (a stopped or hung process, or one that is in no collective). In a
// broadcast or scatter of three or more ranks, a rank that received what
// its call expects from ranks that agree with it may complete before a
// disagreement elsewhere reaches it; its next call fails. After a failure
// the communicator refuses every later call with that cause.
//
// The cost of these checks: a rank that only sends in a call (a broadcast
// root, a reduce or gather leaf, a scatter root) returns only once its
// receivers have checked what it sent (in a rooted tree, once they have
// completed), about one round trip for a small message; a rank that also
// receives from its peers pays nothing. Point-to-point sends do not wait.
//
// comm wires the layers together: it imports bootstrap, collectives,
// transport and the concrete transports; nothing below imports it.
package comm
