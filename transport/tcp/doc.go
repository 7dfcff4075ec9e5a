// Package tcp is goccl's TCP transport: the transport contract (RDMA verbs
// semantics) implemented in software over one TCP connection per endpoint.
//
// It exists so that the collectives run where there is no RDMA adapter, and
// so that the same algorithms, tests and error behaviour hold on every
// machine. A Device listens on one TCP port; each Endpoint publishes a
// versioned address blob {ip, port, 128-bit random token}. Of two endpoints
// being connected, the one with the smaller blob dials; its hello names both
// tokens and the accepting device routes the connection to the endpoint with
// the matching token. Anything else arriving on the port (unknown token, bad
// magic or version, garbage, silence) is dropped after a bounded handshake
// without disturbing established connections.
//
// On the wire every message is a fixed-size, versioned header (wire.go)
// optionally followed by a payload. Writes and reads carry (key, offset,
// length); the target checks the key (random 64 bits per registration,
// revoked on Deregister), the bounds and the access right before it touches
// memory, exactly as an adapter would. A refused access is a NAK to the
// initiator, an OpRemoteError completion on the target, and both endpoints
// enter the error state. Payloads are read from the socket straight into the
// target memory, or into the buffer the target's caller steered that write
// to (transport.Steerer, steer.go); messages that arrive before a receive is
// posted wait in pooled buffers. A write or send completes on the initiator when the target
// acknowledges placement: for a send, placement into a posted receive; for a
// write with immediate, consumption of a receive by its immediate (as an RC
// queue pair answers RNR until a receive is posted), which also holds back
// the acknowledgements of later writes, since writes complete in order. So
// an initiator whose requests completed may close at once: nothing it sent
// is still waiting for a receive on the other side.
//
// Progress is driven by the caller (DESIGN.md, "Progress"): after the
// handshake each connection (a lane, lane.go) leaves Go's netpoller and is
// read and written with non-blocking system calls by whoever drives it. A
// post on an idle connection is written by the posting goroutine; posts
// made while the caller is polling leave together at its next poll (one
// writev). Poll and Wait read the sockets of their queue's endpoints, parse
// frames, place payloads and complete requests themselves; Wait spins
// while data moves (Options.SpinTime without data, shorter and yielding
// the core when Options.Oversubscribed) and then sleeps in poll(2) on the
// sockets, so the data's arrival wakes it directly (park.go). What nobody
// polls (a peer's writes while this side computes, acknowledgements owed,
// output a full socket held back, the drain after a failure) is served by
// one background loop per device (bgloop.go); it stands aside for lanes
// whose queue has a Wait polling them, and a lazy timer hands a queue's
// lanes back to it when callers stop coming (cq.go).
//
// Sockets use TCP_NODELAY, TCP_USER_TIMEOUT and short keepalives so that a
// dead peer or a cut link fails every pending request within a bounded time.
//
// Files mirror the verbs backend: address.go (the blob), device.go (listener,
// registrations, routing), endpoint.go (posts) and fail.go (the error state,
// Close), region.go (registered memory), wire.go (header and hello codecs),
// cq.go (completion queue), sockopt.go (socket tuning); the progress engine
// is lane.go (one connection), rx.go and tx.go (parsing and batching),
// steer.go (writes placed into the caller's buffer),
// park.go (a Wait asleep in poll(2)), bgloop.go (the background loop) and
// spin.go (how long a Wait spins).
//
// The package may import only the standard library, golang.org/x/sys and
// goccl's transport and internal/ratelog packages.
package tcp
