package bootstrap

import (
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func sockopt(t *testing.T, c net.Conn, level, opt int) int {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), level, opt) })
	if gerr != nil {
		t.Fatal(gerr)
	}
	return v
}

// The client's store socket detects a dead peer: keepalive on, and
// TCP_USER_TIMEOUT set.
func TestClientSocketLiveness(t *testing.T) {
	s, _ := newTestServer(t)
	c := dialTest(t, s.Addr())
	if got := sockopt(t, c.conn, unix.SOL_SOCKET, unix.SO_KEEPALIVE); got != 1 {
		t.Errorf("SO_KEEPALIVE = %d", got)
	}
	if got := sockopt(t, c.conn, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE); got != int(keepIdle/time.Second) {
		t.Errorf("TCP_KEEPIDLE = %d", got)
	}
	if got := sockopt(t, c.conn, unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT); got != int(userTimeout/time.Millisecond) {
		t.Errorf("TCP_USER_TIMEOUT = %d", got)
	}
}
