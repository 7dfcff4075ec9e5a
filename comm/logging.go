package comm

import (
	"context"
	"fmt"
	"log/slog"
)

// resolveLogger is the logger of a communicator and of the transports Init
// opens: l, or slog.Default() if nil (which writes through the standard
// log package: "2024/05/01 12:00:00 INFO goccl: rank 0: transports ...");
// with debug, one that takes debug records whatever l's level
// (GOCCL_DEBUG).
func resolveLogger(l *slog.Logger, debug bool) *slog.Logger {
	if l == nil {
		l = slog.Default()
	}
	if _, ok := l.Handler().(debugHandler); debug && !ok {
		l = slog.New(debugHandler{l.Handler()})
	}
	return l
}

// debugHandler lets debug records through to a handler whose level is
// higher: slog's handlers check the level only in Enabled, which this
// answers.
type debugHandler struct{ slog.Handler }

func (h debugHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelDebug || h.Handler.Enabled(ctx, l)
}

func (h debugHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return debugHandler{h.Handler.WithAttrs(as)}
}

func (h debugHandler) WithGroup(name string) slog.Handler {
	return debugHandler{h.Handler.WithGroup(name)}
}

// debugOn says whether l takes debug lines; the communicator asks once, at
// New, and formats no debug line otherwise.
func debugOn(l *slog.Logger) bool { return l.Enabled(context.Background(), slog.LevelDebug) }

// debugf logs a debug line "goccl: rank R: ..." (callers check c.debug
// first, so that a silent communicator formats nothing).
func (c *Comm) debugf(format string, args ...any) {
	if c.debug {
		c.opts.Logger.Debug(fmt.Sprintf("goccl: rank %d: "+format, append([]any{c.rank}, args...)...))
	}
}
