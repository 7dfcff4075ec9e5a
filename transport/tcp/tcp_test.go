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
