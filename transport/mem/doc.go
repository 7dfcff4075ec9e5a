// Package mem is an in-memory transport: every device lives on a Network in
// one process, so a test can run all ranks of a collective as goroutines and
// still go through the full transport contract (registration, keys, bounds
// and access checks, posted requests, completion queues, error states).
//
// A test makes one Network, one Device per rank on it (NewDevice), and
// connects endpoints by exchanging LocalAddress blobs, exactly as over a real
// backend; only endpoints of devices of the same Network can connect.
//
// Semantics follow the contract exactly, as pinned down by the conformance
// suite in transport/transporttest:
//
//   - Remote keys are random (crypto/rand) per registration and looked up on
//     the target's device; the target checks key, bounds and access before
//     it touches memory. A refused access completes the initiator's request
//     with ErrRemoteAccess, reports OpRemoteError on the target, and moves
//     both endpoints into the error state. RemoteRegion.Addr is always zero
//     and the target ignores the Len of a descriptor: its own registration
//     decides.
//   - Each endpoint has one goroutine that carries out its sends, writes and
//     reads in posting order, copying directly between the registered
//     buffers (no staging copy). A send or write-with-immediate that finds no
//     receive posted waits for one, holding up the requests behind it on the
//     same endpoint, as an RC queue pair does on receiver-not-ready; a send
//     completes once its data is in the receive buffer, a write once its
//     data is placed.
//   - A message longer than its receive is ErrLength on both sides and moves
//     both endpoints into the error state.
//
// Fault injection, all of it seeded so that a failing test can be replayed
// (per endpoint; goroutine scheduling still varies between runs):
//
//   - Options.Delay: before carrying out each request an endpoint sleeps a
//     random time up to Delay. Requests of one endpoint are never reordered.
//   - Options.CutProb: each request cuts its connection with this
//     probability.
//   - Network.Cut, Network.Isolate, Network.CutAfter, Endpoint.Cut and
//     Endpoint.CutAfter cut connections now or after a number of requests.
//
// A cut connection behaves like a failed link: both endpoints enter the
// error state with a cause wrapping transport.ErrLink, pending requests on
// both sides complete at once with errors wrapping transport.ErrFlushed and
// ErrLink, and later posts are refused.
//
// This package may import the standard library and transport only.
package mem
