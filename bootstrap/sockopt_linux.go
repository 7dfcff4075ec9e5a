package bootstrap

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

func setUserTimeout(c *net.TCPConn, d time.Duration) {
	rc, err := c.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d/time.Millisecond))
	})
}
