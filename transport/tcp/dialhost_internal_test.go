package tcp

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/internal/logtest"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

// TestDialHost checks that a device with DialHost set dials from that
// address: the accepting side sees it as the connection's source.
func TestDialHost(t *testing.T) {
	// A's blob (127.0.0.2) is smaller than B's (127.0.0.3): A dials.
	da, err := NewDevice(Options{ListenAddress: "127.0.0.2:0", DialHost: "127.0.0.9", Logger: logtest.New(t)})
	if err != nil {
		t.Skipf("no second loopback address: %v", err)
	}
	t.Cleanup(func() { da.Close() })
	db, err := NewDevice(Options{ListenAddress: "127.0.0.3:0", Logger: logtest.New(t)})
	if err != nil {
		t.Skipf("no third loopback address: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	p := &transporttest.Pair{DevA: da, DevB: db}
	p.CQA, p.CQB = transporttest.NewCQ(t, da), transporttest.NewCQ(t, db)
	p.A = transporttest.NewEndpoint(t, da, p.CQA)
	p.B = transporttest.NewEndpoint(t, db, p.CQB)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.B.Connect(ctx, p.A.LocalAddress()); err != nil {
		t.Fatal(err)
	}
	if err := p.A.Connect(ctx, p.B.LocalAddress()); err != nil {
		t.Fatal(err)
	}
	pingPong(t, p)
	l := p.B.(*endpoint).ctl()
	if l == nil {
		t.Fatal("B has no connection after a ping-pong")
	}
	sa, err := unix.Getpeername(l.fd)
	if err != nil {
		t.Fatal(err)
	}
	in4, ok := sa.(*unix.SockaddrInet4)
	if got := netip.AddrFrom4(in4.Addr); !ok || got != netip.MustParseAddr("127.0.0.9") {
		t.Errorf("B sees the connection from %v, want 127.0.0.9", sa)
	}
}

func TestDialHostInvalid(t *testing.T) {
	_, err := NewDevice(Options{ListenAddress: "127.0.0.1:0", DialHost: "not-an-ip"})
	if !errors.Is(err, transport.ErrInvalid) {
		t.Fatalf("DialHost not-an-ip: %v, want ErrInvalid", err)
	}
}
