// Package verbs is goccl's RDMA transport: the transport contract
// implemented with libibverbs on RC queue pairs, for InfiniBand and RoCE
// adapters and for the kernel's Soft-RoCE (rdma_rxe).
//
// A Device is one adapter port with a protection domain. Open picks it from
// the environment: GOCCL_IB_HCA selects devices and ports with NCCL's syntax
// ("rxe0", "mlx5_0:1,mlx5_1", "^mlx5_1" excludes, "=rxe0" matches exactly),
// the port must be ACTIVE, and GOCCL_IB_GID_INDEX overrides the GID (by
// default the RoCE v2 GID of an IPv4 address, ::ffff:a.b.c.d). Without a
// usable device, and in builds without cgo or with the goccl_noverbs tag,
// Open returns an error wrapping transport.ErrNotSupported and the caller
// falls back to TCP.
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
// posted straight to the queue pair; at most Config.QueueDepth of each
// queue, and at most the completion queue's depth in all, may be in flight,
// beyond which Post* fails with ErrInvalid ("queue full").
//
// Completions (cq.go) are polled from one ibv completion queue per
// CompletionQueue; Wait busy-polls for 20us and then sleeps on the
// completion channel through the Go netpoller. A failed work completion
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
// All cgo lives in internal/ibv. The system packages it needs are installed
// by scripts/install-deps.sh; scripts/softroce-test.sh runs the tests on
// Soft-RoCE in a QEMU guest.
//
// The package may import only the standard library, goccl's transport
// package and its own internal/ibv.
package verbs
