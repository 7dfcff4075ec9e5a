package shm

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
)

// TestMapRemote: a peer's region in Alloc'd memory, mapped again with
// MapRemote, shares its bytes both ways, and stays readable after the
// owner deregistered and freed it; regions that cannot be shared that way
// are refused with ErrInvalid. Both as another process would (the
// segment's handle travels over the socket) and as a device of the same
// process.
func TestMapRemote(t *testing.T) {
	for _, noSelf := range []bool{true, false} {
		t.Run(fmt.Sprintf("noSelf=%v", noSelf), func(t *testing.T) {
			o := testOptions(t)
			o.noSelf = noSelf
			p := inProcessPair(t, o, o)
			const n = 3*4096 + 100
			mem, err := Alloc(n)
			if err != nil {
				t.Fatal(err)
			}
			// A region that does not start on a page.
			rb, err := p.DevB.Register(mem[100:], transport.AccessAll)
			if err != nil {
				t.Fatal(err)
			}
			var m []byte
			deadline := time.Now().Add(5 * time.Second)
			for {
				m, err = MapRemote(p.A, rb.Remote())
				if !errors.Is(err, ErrNotMapped) || time.Now().After(deadline) {
					break
				}
				time.Sleep(time.Millisecond)
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(m) != n-100 {
				t.Fatalf("mapping of %d bytes, want %d", len(m), n-100)
			}
			m[0], m[len(m)-1] = 1, 2
			if mem[100] != 1 || mem[n-1] != 2 {
				t.Fatal("the owner does not see the bytes written through the mapping")
			}
			mem[101] = 3
			if m[1] != 3 {
				t.Fatal("the mapping does not see the owner's bytes")
			}
			if err := p.DevB.Deregister(rb); err != nil {
				t.Fatal(err)
			}
			if err := Free(mem); err != nil {
				t.Fatal(err)
			}
			if m[0] != 1 || m[1] != 3 {
				t.Fatal("the mapping lost its bytes once the owner freed the memory")
			}
			if err := Unmap(m); err != nil {
				t.Fatal(err)
			}

			plain := make([]byte, 4096)
			rp, err := p.DevB.Register(plain, transport.AccessAll)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := MapRemote(p.A, rp.Remote()); !errors.Is(err, transport.ErrInvalid) {
				t.Errorf("map a region of plain memory: %v, want ErrInvalid", err)
			}
			shared, err := Alloc(4096)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { Free(shared) })
			ro, err := p.DevB.Register(shared, transport.AccessLocalWrite|transport.AccessRemoteRead)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.DevB.Deregister(ro) })
			if _, err := MapRemote(p.A, ro.Remote()); !errors.Is(err, transport.ErrInvalid) {
				t.Errorf("map a region without remote write access: %v, want ErrInvalid", err)
			}
		})
	}
}

// TestMapRemoteFailedEndpoint: on an endpoint that failed (the peer died
// or the connection broke), MapRemote of a region whose segment is not
// mapped here yet fails with ErrLink at once. It said ErrNotMapped, and a
// caller retrying on that (a sub-communicator's board set-up) waited out
// its own deadline, 5 s, for a segment that could never come.
func TestMapRemoteFailedEndpoint(t *testing.T) {
	o := testOptions(t)
	o.noSelf = true
	p := inProcessPair(t, o, o)
	mem, err := Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Free(mem) })
	rb, err := p.DevB.Register(mem, transport.AccessAll)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.DevB.Deregister(rb) })
	e, ok := p.A.(*endpoint)
	if !ok {
		t.Fatalf("endpoint is a %T", p.A)
	}
	e.fail(failure{cause: fmt.Errorf("the peer died: %w", transport.ErrLink)})
	if _, err := MapRemote(p.A, rb.Remote()); !errors.Is(err, transport.ErrLink) {
		t.Fatalf("MapRemote on a failed endpoint: %v, want ErrLink", err)
	}
}
