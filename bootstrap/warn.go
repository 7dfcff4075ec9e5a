package bootstrap

import (
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/goccl/goccl/internal/ratelog"
)

// The store logs one warning per refused or dropped connection, but a
// flood of them (a port scanner, a rank started with an old secret in a
// restart loop) must not bury the rest of the log: per kind of warning and
// remote host, the first warnBurst are logged in full and the rest counted,
// one summary line per warnInterval ("bootstrap: store: 195 more refused
// connections (wrong secret) from 10.0.0.7 in the last 10s").
const (
	warnBurst    = 5
	warnInterval = 10 * time.Second
)

// A warnKind is one kind of per-connection warning with its own limiter.
type warnKind struct {
	log  *slog.Logger
	what string // the summary's words around the key: "refused connections (wrong secret) from %s"
	lim  *ratelog.Limiter
}

func newWarnKind(log *slog.Logger, what string) *warnKind {
	k := &warnKind{log: log, what: what}
	k.lim = ratelog.New(warnBurst, warnInterval, k.summarise)
	return k
}

func (k *warnKind) summarise(s ratelog.Summary) {
	k.log.Warn(fmt.Sprintf("bootstrap: store: %d more %s in the last %s",
		s.Suppressed, fmt.Sprintf(k.what, s.Key), s.Span.Round(time.Second)))
}

// warn logs msg with args unless key (the remote host, see hostOf) has had
// its share of this kind of warning lately; then it only counts it.
func (k *warnKind) warn(key string, msg string, args ...any) {
	if k.lim.Allow(key) {
		k.log.Warn(msg, args...)
	}
}

// hostOf is the address a flood comes from: the IP without the port, which
// changes with every connection.
func hostOf(a net.Addr) string {
	if a == nil {
		return "unknown"
	}
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String()
	}
	if h, _, err := net.SplitHostPort(a.String()); err == nil {
		return h
	}
	return a.String()
}

// connWarnings are the store's rate-limited warnings.
type connWarnings struct {
	wrongSecret     *warnKind // a client that does not know the secret
	unauthenticated *warnKind // a connection dropped during the handshake
	dropped         *warnKind // an authenticated connection dropped for a bad frame
	accept          *warnKind // accept(2) failing (out of descriptors, say)
}

func newConnWarnings(log *slog.Logger) *connWarnings {
	return &connWarnings{
		wrongSecret:     newWarnKind(log, "refused connections (wrong secret) from %s"),
		unauthenticated: newWarnKind(log, "dropped unauthenticated connections from %s"),
		dropped:         newWarnKind(log, "dropped connections from %s"),
		accept:          newWarnKind(log, "failed accepts on %s"),
	}
}

// stop logs the counts not yet reported.
func (w *connWarnings) stop() {
	for _, k := range []*warnKind{w.wrongSecret, w.unauthenticated, w.dropped, w.accept} {
		k.lim.Stop()
	}
}
