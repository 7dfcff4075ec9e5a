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
// target memory; messages that arrive before a receive is posted wait in
// pooled buffers. A write or send completes on the initiator when the target
// acknowledges placement: for a send, placement into a posted receive; for a
// write with immediate, consumption of a receive by its immediate (as an RC
// queue pair answers RNR until a receive is posted), which also holds back
// the acknowledgements of later writes, since writes complete in order. So
// an initiator whose requests completed may close at once: nothing it sent
// is still waiting for a receive on the other side.
//
// Sockets use TCP_NODELAY, TCP_USER_TIMEOUT and short keepalives so that a
// dead peer or a cut link fails every pending request within a bounded time.
//
// Files mirror the verbs backend: address.go (the blob), device.go (listener,
// registrations, routing), endpoint.go (the connected pair), region.go
// (registered memory), wire.go (header and hello codecs), cq.go (completion
// queue), sockopt.go (socket tuning).
//
// The package may import only the standard library, golang.org/x/sys and
// goccl's transport package.
package tcp
