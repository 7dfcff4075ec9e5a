//go:build !cgo || !linux || goccl_noverbs

package verbs

import (
	"errors"
	"testing"

	"github.com/goccl/goccl/transport"
)

// TestOpenStub: a build without verbs reports no device, as
// ErrNotSupported, so that callers fall back to TCP.
func TestOpenStub(t *testing.T) {
	d, err := OpenConfig(Config{})
	if d != nil || !errors.Is(err, transport.ErrNotSupported) {
		t.Fatalf("OpenConfig in a build without verbs: %v, %v; want ErrNotSupported", d, err)
	}
	t.Logf("as expected: %v", err)
}
