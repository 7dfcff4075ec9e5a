package multi

import (
	"context"

	"github.com/goccl/goccl/transport"
)

// endpoint is a member's endpoint that takes the Device's regions: each
// post hands the member its own region of the buffer. Posting blocks no
// more than the member's does; on a dead peer it behaves as the member's.
type endpoint struct {
	dev    *Device
	member int
	sub    transport.Endpoint
}

var (
	_ transport.Endpoint    = (*endpoint)(nil)
	_ transport.LazyWriter  = (*endpoint)(nil)
	_ transport.QuietWriter = (*quietEndpoint)(nil)
	_ transport.Steerer     = (*endpoint)(nil)
)

// Member is the index of the member the endpoint belongs to.
func (e *endpoint) Member() int { return e.member }

func (e *endpoint) LocalAddress() []byte { return e.sub.LocalAddress() }

func (e *endpoint) Connect(ctx context.Context, remote []byte) error {
	return e.sub.Connect(ctx, remote)
}

func (e *endpoint) PostSend(id uint64, r transport.Region, off, n int) error {
	s, err := e.dev.sub(r, e.member, "send")
	if err != nil {
		return err
	}
	return e.sub.PostSend(id, s, off, n)
}

func (e *endpoint) PostRecv(id uint64, r transport.Region, off, n int) error {
	s, err := e.dev.sub(r, e.member, "recv")
	if err != nil {
		return err
	}
	return e.sub.PostRecv(id, s, off, n)
}

func (e *endpoint) PostWrite(id uint64, local transport.Region, off, n int, remote transport.RemoteRegion, roff uint64, imm *uint32) error {
	s, err := e.dev.sub(local, e.member, "write")
	if err != nil {
		return err
	}
	return e.sub.PostWrite(id, s, off, n, remote, roff, imm)
}

// PostWriteLazy is the member's PostWriteLazy (transport.LazyWriter), or
// its PostWrite if it has none.
func (e *endpoint) PostWriteLazy(id uint64, local transport.Region, off, n int, remote transport.RemoteRegion, roff uint64, imm *uint32) error {
	lw, ok := e.sub.(transport.LazyWriter)
	if !ok {
		return e.PostWrite(id, local, off, n, remote, roff, imm)
	}
	s, err := e.dev.sub(local, e.member, "write")
	if err != nil {
		return err
	}
	return lw.PostWriteLazy(id, s, off, n, remote, roff, imm)
}

// quietEndpoint is the endpoint of a member whose endpoints have
// PostWriteQuiet (transport.QuietWriter). Only those offer it, so that a
// write posted through it completes nothing once placed wherever a caller
// finds the method.
type quietEndpoint struct {
	*endpoint
	quiet transport.QuietWriter
}

// PostWriteQuiet is the member's PostWriteQuiet.
func (e *quietEndpoint) PostWriteQuiet(id uint64, local transport.Region, off, n int, remote transport.RemoteRegion, roff uint64, imm *uint32, lazy bool) error {
	s, err := e.dev.sub(local, e.member, "write")
	if err != nil {
		return err
	}
	return e.quiet.PostWriteQuiet(id, s, off, n, remote, roff, imm, lazy)
}

func (e *endpoint) PostRead(id uint64, local transport.Region, off, n int, remote transport.RemoteRegion, roff uint64) error {
	s, err := e.dev.sub(local, e.member, "read")
	if err != nil {
		return err
	}
	return e.sub.PostRead(id, s, off, n, remote, roff)
}

func (e *endpoint) Close() error { return e.sub.Close() }

// Sub is the member's endpoint this one wraps.
func (e *endpoint) Sub() transport.Endpoint { return e.sub }

// Steer is the member's Steer (transport.Steerer), or false if it has
// none.
func (e *endpoint) Steer(i int, r transport.Region, off int, imm uint32, dst []byte) bool {
	st, ok := e.sub.(transport.Steerer)
	if !ok {
		return false
	}
	s, err := e.dev.sub(r, e.member, "steer")
	if err != nil {
		return false
	}
	return st.Steer(i, s, off, imm, dst)
}

// Unsteer is the member's Unsteer (transport.Steerer).
func (e *endpoint) Unsteer(i int) bool {
	if st, ok := e.sub.(transport.Steerer); ok {
		return st.Unsteer(i)
	}
	return false
}
