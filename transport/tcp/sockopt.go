package tcp

import (
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// tune sets the socket options every connection of the device uses:
// TCP_NODELAY (small messages leave at once), TCP_USER_TIMEOUT (unacknowledged
// data fails the connection after the timeout instead of ~15 minutes of
// retries), keepalive with short idle/interval/count (an idle connection
// over a cut link errors too), and the congestion control
// (Options.Congestion). See notes/multihost.md.
func tune(c *net.TCPConn, o *Options) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("syscall conn: %w", err)
	}
	var serr error
	set := func(fd uintptr, level, opt, v int, name string) {
		if serr != nil {
			return
		}
		if err := unix.SetsockoptInt(int(fd), level, opt, v); err != nil {
			serr = fmt.Errorf("setsockopt %s=%d: %w", name, v, err)
		}
	}
	err = raw.Control(func(fd uintptr) {
		set(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1, "TCP_NODELAY")
		if o.UserTimeout > 0 {
			set(fd, unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(o.UserTimeout/time.Millisecond), "TCP_USER_TIMEOUT")
		}
		if o.KeepAliveIdle > 0 {
			set(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1, "SO_KEEPALIVE")
			set(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, secs(o.KeepAliveIdle), "TCP_KEEPIDLE")
			set(fd, unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, secs(o.KeepAliveInterval), "TCP_KEEPINTVL")
			set(fd, unix.IPPROTO_TCP, unix.TCP_KEEPCNT, o.KeepAliveCount, "TCP_KEEPCNT")
		} else {
			set(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 0, "SO_KEEPALIVE")
		}
		if serr == nil {
			serr = setCongestion(int(fd), o.Congestion)
		}
		if o.SocketBuffer > 0 {
			set(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, o.SocketBuffer, "SO_SNDBUF")
			set(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, o.SocketBuffer, "SO_RCVBUF")
		}
	})
	if err != nil {
		return fmt.Errorf("control: %w", err)
	}
	return serr
}

// CongestionSystem is the Options.Congestion that keeps the system's
// default congestion control.
const CongestionSystem = "system"

// defaultCongestion are the congestion controls tried in turn when
// Options.Congestion is empty (see Options.Congestion for why reno).
var defaultCongestion = []string{"reno"}

// setCongestion sets the congestion control of socket fd (see
// Options.Congestion).
func setCongestion(fd int, name string) error {
	switch name {
	case CongestionSystem:
		return nil
	case "":
		for _, n := range defaultCongestion {
			if unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, n) == nil {
				return nil
			}
		}
		return nil // neither allowed here: the system's default
	}
	if err := unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, name); err != nil {
		return fmt.Errorf("setsockopt TCP_CONGESTION=%s (see net.ipv4.tcp_available_congestion_control and tcp_allowed_congestion_control): %w", name, err)
	}
	return nil
}

// CheckCongestion reports whether the connections of a device with
// Options.Congestion name could be given it: "" and CongestionSystem
// always; another name if this host lets a socket take it (a probe socket
// is set, as each connection would be), so that a name the host refuses
// fails where the option is read rather than at the first connection.
func CheckCongestion(name string) error {
	if name == "" || name == CongestionSystem {
		return nil
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil // no socket to try it on: the connections will say
	}
	defer unix.Close(fd)
	return setCongestion(fd, name)
}

// secs rounds d up to whole seconds, at least 1.
func secs(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	return max(s, 1)
}

// tcpCloseWait is Linux's TCP_CLOSE_WAIT state: the peer sent FIN.
const tcpCloseWait = 8

// peerSentFIN reports whether the connection ended by the peer's orderly
// close (state CLOSE_WAIT) rather than by an abort (reset, user timeout,
// keepalive), whose error another reader's system call may already have
// consumed, leaving this one a bare end of file.
func peerSentFIN(fd int) bool {
	info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil {
		return true
	}
	return info.State == tcpCloseWait
}
