//go:build !linux

package bootstrap

import (
	"net"
	"time"
)

func setUserTimeout(*net.TCPConn, time.Duration) {}
