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
// Point-to-point messages match by source and tag, as MPI's: a Recv
// passes over messages of other tags, which wait for their own Recvs.
// Point-to-point calls run in that order too: a Send completes once its
// message is buffered for the peer, so sends queued before receives work
// on every rank at once, but a Recv holds the calls behind it until its
// message comes, so ranks that each queue a Recv before the Send its peer
// waits for (MPI's Irecv, then Send, around a ring) wait on one another,
// which the stall diagnosis reports after about a second, unless the
// Sends complete without their receivers: the Sends queued behind a
// waiting Recv whose messages fit what a Send buffers for its receiver
// (free staging slots, or mailbox room and kept copies over the
// shared-memory board) run ahead of it, so such rings and halo exchanges
// work for those sizes. SendRecv exchanges with two peers at once
// (MPI_Sendrecv), at any size.
//
// Errors name the collective, its sequence number, the ranks involved and
// the cause. A failure fails the call on every rank, fast, naming the same
// rank at its root: the rank that fails tells every connected peer why over
// the data links before it closes them (so survivors agree also when the bootstrap
// store died with its host) and publishes details in the store. Ranks that
// disagree on a call (collective, count, type, operation, root, or how
// many collectives they made) fail with an error naming both calls, the
// differing rank first; a rank that refuses its own arguments breaks the
// communicator on every rank. A stalled collective compares its call with
// those of the ranks it waits on after a second without progress, and at
// the stall timeout blames the rank at the end of the chain of waits (a
// stopped or hung process, or one that is in no collective). After a
// failure the communicator refuses every later call with that cause.
//
// When a disagreement fails a rank: every rank that receives in the call
// checks each message as it arrives and fails in that call. A rank that
// only sends in a rooted call (a broadcast or scatter root, a reduce or
// gather leaf) returns once its data is sent, as MPI's and NCCL's do, and
// so does a rank of a broadcast or scatter of three or more ranks whose
// part of the tree agrees: they learn of the disagreement in a later call
// (the failing ranks' notices, or data out of place; usually the next,
// though a rank whose partners in the next call had done their part of it
// before they failed may complete that too, and a root of a run of small
// broadcasts over shared memory may complete up to 128 of them before it
// looks), or at Close, which waits for
// the receivers to take what such calls sent and reports the failures of
// peers that have reached it. The ranks that receive from a rank that
// disagrees fail in the call itself. With
// Options.StrictChecks (GOCCL_STRICT_CHECKS=1) every rank fails in the
// call itself: a rank that only sends returns once its receivers have
// checked what it sent (in a rooted tree, once they have completed), about
// one round trip more for a small message, and broadcasts and scatters of
// three or more ranks end with a barrier (collectives.Agreed). A rank that
// also receives from its peers pays nothing either way. Point-to-point
// sends do not wait.
//
// comm wires the layers together: it imports bootstrap, collectives,
// transport and the concrete transports; nothing below imports it.
package comm
