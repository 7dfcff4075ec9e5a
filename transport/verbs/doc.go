// Package verbs is goccl's RDMA transport: the transport contract
// implemented with libibverbs on RC queue pairs, for InfiniBand and RoCE
// adapters and for the kernel's Soft-RoCE (rdma_rxe).
//
// A Device is one adapter port with a protection domain. OpenConfig picks
// it as its Config says (comm fills the Config from GOCCL_IB_HCA and
// GOCCL_IB_GID_INDEX; this package reads no environment): Config.HCA
// selects devices and ports with NCCL's syntax ("rxe0", "mlx5_0:1,mlx5_1",
// "^mlx5_1" excludes, "=rxe0" matches exactly), the port must be ACTIVE,
// and Config.GIDIndex overrides the GID (by default the RoCE v2 GID of an
// IPv4 address, ::ffff:a.b.c.d). Without a usable device, on a host
// without libibverbs.so.1, and in builds without cgo or with the
// goccl_noverbs tag, OpenConfig returns an error wrapping
// transport.ErrNotSupported that says why, and the caller falls back to
// TCP.
//
// Registration (region.go) grants exactly the requested remote rights (verbs
// adds local write whenever remote write is granted; the transport still
// refuses receives into a region registered without AccessLocalWrite). A
// cache keyed by (address, length, access) makes registering the same buffer
// again free; the key is revoked when the last registration of the range is
// deregistered. Go heap memory is pinned with runtime.Pinner while
// registered; memory from transport.Alloc is outside the heap.
//
// An Endpoint (endpoint.go) is an RC queue pair plus a tiny control queue
// pair (ctl.go). Its address blob (address.go, versioned) carries both queue
// pair numbers and initial PSNs, the GID, the LID and the port's active MTU;
// Connect uses the smaller of the two active MTUs as path MTU and logs it.
// Sends, receives, RDMA writes (with or without immediate) and reads are
// posted straight to the queue pair. A completion queue of depth d (at most
// the device's max_cqe, else ErrNotSupported) lets d requests be posted and
// not yet taken out by Poll or Wait, as the contract says; beyond that, or
// beyond the queue pair's own queues (Config.QueueDepth, by default the
// completion queue's depth capped at max_qp_wr), Post* fails with
// ErrQueueFull. The adapter's completion queue therefore never overruns; if
// it fails anyway (a device that lies about its depth), every endpoint on it
// fails and every pending request completes with ErrLink.
//
// Completions (cq.go) are polled from one ibv completion queue per
// CompletionQueue by the goroutine that waits: Wait busy-polls for
// Config.Spin (20us by default; none when ranks outnumber cores), then
// sleeps on the completion channel itself in the Go netpoller; no goroutine
// stands between the adapter and the caller. A failed work completion
// names its ibv_wc_status and wraps the matching sentinel: remote access
// error -> ErrRemoteAccess, local length error (and remote invalid request
// on a send) -> ErrLength, retry exceeded -> ErrLink and ErrPeerClosed,
// flushed -> ErrFlushed plus the endpoint's first error. The first error
// moves the endpoint into the error state: the queue pair is moved to ERR
// so that everything pending is flushed, and later posts are refused with
// that cause.
//
// What verbs does not tell, the control queue pair does. The target of a
// refused access: its adapter moves its queue pair to the error state and
// flushes its receives; the transport reports one OpRemoteError (wrapping
// ErrRemoteAccess) before the flushed receives, whether it learns of it from
// the flush or from the initiator's ctlRefused message (a target without
// posted receives learns only from the message). A closed peer: Close sends
// ctlBye (waiting at most 500 ms for its acknowledgement), and the peer's
// pending and later requests fail with ErrPeerClosed. A peer that dies
// without closing is noticed when a request to it exhausts its retries.
//
// Files mirror transport/tcp: address.go (the blob), device.go (opening,
// closing), endpoint.go (queue pairs, connect, posts, close), region.go
// (registration and its cache), cq.go (completion queue); and, verbs only,
// select.go (GOCCL_IB_HCA and GID choice), completion.go (work completions
// to contract completions, the error state) and ctl.go (the control plane).
// All cgo lives in internal/ibv, which loads libibverbs.so.1 at run time:
// building needs no rdma-core headers, and a binary starts without the
// library (OpenConfig then fails with ErrNotSupported, and comm falls back to
// TCP). internal/ibvfake is an in-memory fabric behind the same interfaces,
// on which the tests run everywhere (the conformance suite included);
// scripts/softroce-test.sh runs them again on Soft-RoCE in a QEMU guest.
//
// The package may import only the standard library, goccl's transport
// package and its own internal/ibv (its tests also internal/ibvfake).
package verbs
