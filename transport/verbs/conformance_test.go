package verbs

import (
	"testing"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

// TestConformance runs the transport contract's suite on the verbs device
// the environment selects (two devices on the same adapter, connected
// through it).
func TestConformance(t *testing.T) {
	openDevice(t) // skip the whole suite at once without a device
	transporttest.Run(t, func(tb testing.TB) transport.Device {
		cfg, err := envConfig()
		if err != nil {
			tb.Fatal(err)
		}
		d, err := OpenConfig(cfg)
		SkipIfNotSupported(tb, err)
		if err != nil {
			tb.Fatalf("open: %v", err)
		}
		return d
	})
}
