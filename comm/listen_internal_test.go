package comm

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/bootstrap"
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
			if ip := firstIPv4(&ifs[i], false); ip != nil {
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

// GOCCL_SOCKET_IFNAME may name the loopback interface in a job on one
// host: the rank advertises its loopback address. It was refused ("interface
// has no IPv4 address"), though lo has 127.0.0.1. With ranks on other
// hosts, who cannot reach that address, it is refused and says why.
func TestSocketInterfaceLoopback(t *testing.T) {
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	lo := ""
	for i := range ifs {
		if ifs[i].Flags&net.FlagLoopback != 0 && firstIPv4(&ifs[i], true) != nil {
			lo = ifs[i].Name
			break
		}
	}
	if lo == "" {
		t.Skip("SKIP: no loopback interface with an IPv4 address")
	}
	ip, err := advertiseIP(nil, bootstrap.Info{Rank: 0, Size: 2, LocalRank: 0, LocalSize: 2}, lo, "GOCCL_SOCKET_IFNAME")
	if err != nil || !net.ParseIP(ip).IsLoopback() {
		t.Fatalf("one host, %s: %q, %v; want its loopback address", lo, ip, err)
	}
	_, err = advertiseIP(nil, bootstrap.Info{Rank: 0, Size: 4, LocalRank: 0, LocalSize: 2}, lo, "GOCCL_SOCKET_IFNAME")
	if err == nil || !strings.Contains(err.Error(), "loopback") || !strings.Contains(err.Error(), "GOCCL_SOCKET_IFNAME") {
		t.Fatalf("two hosts, %s: %v; want a refusal that names the setting and the loopback address", lo, err)
	}
	if _, err := advertiseIP(nil, bootstrap.Info{Size: 1, LocalSize: 1}, "no-such-if0", "GOCCL_SOCKET_IFNAME"); err == nil {
		t.Fatal("an interface that does not exist was accepted")
	}
}
