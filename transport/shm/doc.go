// Package shm is goccl's shared-memory transport: the transport contract
// (RDMA verbs semantics) between processes of one host, with the data path
// in shared mappings and no kernel on the hot path.
//
// # Memory
//
// Memory from Alloc lives in a sealed memfd mapped MAP_SHARED (nothing in
// /dev/shm or any file system, so nothing is left behind by any exit). A
// region registered in it is exported to the device's peers: when a peer
// first reaches a region of the segment it asks for it, the memfd travels
// over the connection's Unix socket (SCM_RIGHTS) and the peer maps it (a
// peer that never touches the segment never gets it; meanwhile the first
// accesses take the kernel's copy below, or wait for the mapping without
// it). A peer's PostWrite or PostRead of such a region is one copy by the
// peer, straight between the two regions, after it checked key, bounds and
// access in this device's region table (a read-only mapping for the peer).
// Memory from anywhere else is reached with one copy by the kernel
// (process_vm_writev, process_vm_readv) where that is allowed, which
// Connect detects per connection by reading a known value of the peer;
// otherwise (Yama ptrace_scope, a container without CAP_SYS_PTRACE,
// Options.DisableCMA) the data goes through the ring and the target checks
// and places it: one extra copy. comm allocates communication buffers and
// staging with Alloc so that the common case is the single copy.
//
// # Revocation
//
// Deregister clears the region's slot in the table, then waits until no
// peer is inside a copy of it: a peer announces the slot in a busy word of
// its transmit segment before it checks the slot and clears it after the
// copy (sequentially consistent atomics on both sides, a Dekker pair), so
// either the peer sees the revocation and refuses, or Deregister waits for
// the copy. After Deregister returns no peer touches the memory through
// this device, and the memory may be reused or freed (Free refuses memory
// still registered). Endpoint.Close likewise clears an open flag and waits
// out the peer's copy. The wait is bounded by Options.RevokeTimeout for a
// peer that stalls inside a copy (stopped, not dead): such a peer is cut
// off (its connection fails), and a copy it resumes later could still
// land; a peer that died is not waited for.
//
// # Rings and waiting
//
// Each endpoint owns a transmit segment with two single-producer,
// single-consumer rings of 64-byte cells that the peer maps and consumes:
// the request ring carries messages (in chunks of RingSize/16), immediates
// of direct writes, staged writes and read requests, in post order; the
// answer ring carries the answers to the peer's staged reads, which so
// never wait behind a request. The producer writes a record, then stores
// the tail; the consumer loads the tail, reads, then stores the head
// (ring.go). A send or a write with immediate completes when the peer
// consumed its record, which it does only with a receive posted (a record
// without one waits in the ring, and the requests behind it, as on an RC
// queue pair on receiver-not-ready); a direct write without immediate
// completes at once.
//
// The caller that waits drives progress: CompletionQueue.Poll consumes the
// rings of the queue's endpoints and pushes what waits for room; Wait polls
// for Options.Spin, then polls with a sched_yield between polls for
// Options.Yield (it stays runnable, and a rank that waits for a core gets
// it), then sleeps on a futex in the device's control segment (one bell
// per completion queue), which peers ring after they publish or consume
// records, and only when someone sleeps. A waiter about to sleep
// while its peer has work to do for it (records to consume, records waiting
// for room) nudges the peer: one frame on the Unix socket, whose reader
// goroutine runs progress on the connection, in case the peer's caller is
// busy elsewhere. A caller that polls without sleeping nudges after 100 µs,
// then at doubling intervals. No goroutine hands work to another on the hot
// path.
//
// # Connections and trust
//
// A device listens on an abstract Unix socket (SOCK_SEQPACKET) named by a
// random token; an endpoint's address blob carries the device's pid, that
// token, the endpoint's token and a hash of HostID. Of two endpoints the
// one with the smaller tokens dials. Both sides check SO_PEERCRED: the
// peer must run as the same uid, and be the process its blob names; the
// accepting endpoint also checks the tokens of the hello. Then the sides
// exchange their control and transmit segments. A process of another user
// cannot connect, so it cannot map a rank's memory.
//
// # Failures
//
// A peer that closes sends a bye frame; one that dies (SIGKILL) hangs up
// its socket, which the reader goroutine sees at once. Either way what the
// peer published before is placed, then every pending request fails with
// ErrPeerClosed (ErrFlushed wrapping it), within milliseconds. A refused
// access (checked by the initiator for direct and CMA copies, by the target
// for staged ones) completes the request with ErrRemoteAccess, reports
// OpRemoteError on the target, and puts both endpoints into the error
// state, as RC queue pairs do. The ring's contents and the control frames
// are checked before use and fuzzed: a broken peer fails the connection
// (ErrLink), never this process.
//
// # Using it
//
// A process makes one Device (NewDevice) and uses it for its peers on the
// same host: those whose HostID, published through bootstrap, equals its
// own. Buffers made for communication come from Alloc (or Device.Alloc)
// and may be registered with any backend; a region of other memory works
// too, through CMA or the ring. Where the ranks of a host outnumber its
// cores and waits are long (computation between calls), shorter
// Options.Spin and Options.Yield put waiters to sleep sooner.
//
// Files mirror the other backends: address.go (the blob), device.go
// (control segment, listener, registrations), region.go, endpoint.go
// (posting), fail.go (the error state, Close), connect.go (handshake),
// reader.go (the control connection), progress.go (driving an endpoint),
// tx.go and rx.go (producing and consuming the rings), remote.go (the
// paths into a peer's memory), cq.go, ring.go, ctl.go (shared layouts,
// bells), wire.go (control frames), alloc.go (shared memory), futex.go.
//
// The package is Linux only (memfd, abstract Unix sockets, SO_PEERCRED,
// process_vm_readv, futex). It may import only the standard library,
// golang.org/x/sys and goccl's transport package.
package shm
