package tcp

import (
	"testing"

	"github.com/goccl/goccl/internal/logtest"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

// testOptions listens on loopback only and keeps diagnostics in the test log.
func testOptions(t testing.TB) Options {
	return Options{
		ListenAddress: "127.0.0.1:0",
		Logger:        logtest.New(t),
	}
}

func newTestDevice(t testing.TB) *Device {
	t.Helper()
	d, err := NewDevice(testOptions(t))
	if err != nil {
		t.Fatalf("new device: %v", err)
	}
	return d
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, func(t testing.TB) transport.Device { return newTestDevice(t) })
}

// With more ranks than cores a Wait yields between polls and drives a
// queue of several sockets through one poll(2) (cq.drive's scan): the
// same contract holds.
func TestConformanceOversubscribed(t *testing.T) {
	transporttest.Run(t, func(t testing.TB) transport.Device {
		t.Helper()
		o := testOptions(t)
		o.Oversubscribed = true
		d, err := NewDevice(o)
		if err != nil {
			t.Fatalf("new device: %v", err)
		}
		return d
	})
}
