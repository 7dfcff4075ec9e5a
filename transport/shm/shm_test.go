package shm

import (
	"testing"

	"github.com/goccl/goccl/internal/logtest"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

// testOptions keeps diagnostics in the test log.
func testOptions(t testing.TB) Options {
	return Options{Logger: logtest.New(t)}
}

func newTestDevice(t testing.TB, o Options) *Device {
	t.Helper()
	d, err := NewDevice(o)
	if err != nil {
		t.Fatalf("new device: %v", err)
	}
	return d
}

// The conformance suite runs once per path a peer's write or read can take
// to memory that is not from Alloc (the suite registers plain slices): in
// one process, the peer's buffer directly; across processes, cross-memory
// attach; where that is refused, the ring with the target copying.
func TestConformance(t *testing.T) {
	modes := []struct {
		name string
		opts func(*Options)
	}{
		{"InProcess", func(*Options) {}},
		{"CMA", func(o *Options) { o.noSelf = true }},
		{"Staged", func(o *Options) { o.noSelf, o.DisableCMA = true, true }},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			transporttest.Run(t, func(t testing.TB) transport.Device {
				o := testOptions(t)
				m.opts(&o)
				return newTestDevice(t, o)
			})
		})
	}
}
