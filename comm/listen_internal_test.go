package comm

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/goccl/goccl/transport/tcp"
)

// A rank's TCP transport listens on the address it advertises, not on
// every interface: a job on loopback (one host) is not reachable from the
// network. It listened on *:port.
func TestTCPListensOnTheAdvertisedAddress(t *testing.T) {
	var other net.IP
	ifs, _ := net.Interfaces()
	for i := range ifs {
		if ifs[i].Flags&net.FlagUp != 0 && ifs[i].Flags&net.FlagLoopback == 0 {
			if ip := firstIPv4(&ifs[i]); ip != nil {
				other = ip
				break
			}
		}
	}
	if other == nil {
		t.Skip("SKIP: no up, non-loopback IPv4 interface to dial from")
	}
	ts := transportSetup{opts: Options{SocketTimeout: time.Second}}
	d, err := ts.openTCP("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	port := int(d.(*tcp.Device).Addr().Port())
	c, err := net.DialTimeout("tcp", net.JoinHostPort(other.String(), strconv.Itoa(port)), 2*time.Second)
	if err == nil {
		c.Close()
		t.Fatalf("advertising 127.0.0.1, the transport accepts connections on %v:%d", other, port)
	}
	c, err = net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 2*time.Second)
	if err != nil {
		t.Fatalf("advertising 127.0.0.1, dialing it: %v", err)
	}
	c.Close()
}
