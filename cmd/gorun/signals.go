package main

import (
	"os"
	"os/signal"
	"syscall"
)

// signals relays SIGINT and SIGTERM sent to gorun to the supervision loop,
// which forwards them to every rank (a second one kills the ranks).
type signals struct {
	c   chan syscall.Signal
	raw chan os.Signal
	end chan struct{}
}

// notifySignals starts catching SIGINT and SIGTERM. It is called before
// any rank starts, so that no signal is lost.
func notifySignals() *signals {
	s := &signals{c: make(chan syscall.Signal, 2), raw: make(chan os.Signal, 2), end: make(chan struct{})}
	signal.Notify(s.raw, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		for {
			select {
			case v := <-s.raw:
				if sig, ok := v.(syscall.Signal); ok {
					select {
					case s.c <- sig:
					default: // two are pending already; the ranks get SIGKILL
					}
				}
			case <-s.end:
				return
			}
		}
	}()
	return s
}

// stop stops catching signals; gorun's default handling returns.
func (s *signals) stop() {
	signal.Stop(s.raw)
	close(s.end)
}
