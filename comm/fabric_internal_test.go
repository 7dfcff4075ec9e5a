package comm

import (
	"strings"
	"testing"

	"github.com/goccl/goccl/transport"
)

// TestRouteNamesTheWrongLocalSize: with GOCCL_TRANSPORT=auto only shared
// memory is opened when the launcher says every rank is on this host; a
// peer whose host identity differs then cannot be reached, and the error
// says why and what to change. It said "(GOCCL_TRANSPORT=shm)", a setting
// the user had not made.
func TestRouteNamesTheWrongLocalSize(t *testing.T) {
	for _, tc := range []struct{ transport, want string }{
		{"auto", "the launcher's local size said every rank is on this one"},
		{"shm", "only shared memory is in use (GOCCL_TRANSPORT=shm)"},
	} {
		var shm struct{ transport.Device }
		c := &Comm{rank: 0, size: 2}
		c.opts.Transport = tc.transport
		c.devs.shm = shm
		c.hosts = []int{0, 1}
		err := c.route()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("GOCCL_TRANSPORT=%s: %v, want %q", tc.transport, err, tc.want)
		}
	}
}
