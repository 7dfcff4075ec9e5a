package bootstrap

import (
	"net"
	"time"
)

// Liveness settings for every store socket, so that a dead peer or a cut
// link turns into an error instead of a hang: keepalive probes after
// keepIdle of silence, every keepInterval, keepCount of them; and on Linux
// TCP_USER_TIMEOUT, which fails a connection whose sent data (or probes)
// stay unacknowledged for userTimeout.
const (
	keepIdle     = 5 * time.Second
	keepInterval = 2 * time.Second
	keepCount    = 3
	userTimeout  = 15 * time.Second
)

// tuneConn applies the liveness settings. Failures are ignored: they only
// make dead-peer detection slower.
func tuneConn(c net.Conn) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	_ = tc.SetKeepAliveConfig(net.KeepAliveConfig{
		Enable:   true,
		Idle:     keepIdle,
		Interval: keepInterval,
		Count:    keepCount,
	})
	_ = tc.SetNoDelay(true)
	setUserTimeout(tc, userTimeout)
}
