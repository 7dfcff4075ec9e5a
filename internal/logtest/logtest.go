// Package logtest gives tests slog loggers: one that writes to the test's
// log, one that hands each line to a printf-style function, and a Recorder
// that keeps the lines for the test to inspect. All of them take every
// record, debug ones included.
package logtest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// New returns a logger that writes to tb's log ("level=WARN msg=..."
// without the time). Like tb.Log, it must not be used after the test ends.
func New(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tb.Output(), &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
}

// Func returns a logger that calls logf("%s", line) once per record, the
// line being "LEVEL message key=value ...": a test's collector, or a
// benchmark's b.Logf.
func Func(logf func(format string, args ...any)) *slog.Logger {
	return slog.New(&handler{out: func(line string) { logf("%s", line) }})
}

// A Recorder keeps the lines of its Logger's records ("LEVEL message
// key=value ..."). It is safe for concurrent use.
type Recorder struct {
	mu    sync.Mutex
	lines []string
}

// Logger returns a logger whose records r keeps.
func (r *Recorder) Logger() *slog.Logger {
	return slog.New(&handler{out: func(line string) {
		r.mu.Lock()
		r.lines = append(r.lines, line)
		r.mu.Unlock()
	}})
}

// Lines returns a copy of the lines kept so far.
func (r *Recorder) Lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lines...)
}

// String is the lines kept so far, one per line.
func (r *Recorder) String() string { return strings.Join(r.Lines(), "\n") }

// Count is the number of lines kept so far that contain sub.
func (r *Recorder) Count(sub string) int {
	n := 0
	for _, l := range r.Lines() {
		if strings.Contains(l, sub) {
			n++
		}
	}
	return n
}

// WaitFor waits up to d for a line containing sub, and fails tb with the
// lines kept if none comes.
func (r *Recorder) WaitFor(tb testing.TB, sub string, d time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for r.Count(sub) == 0 {
		if time.Now().After(deadline) {
			tb.Fatalf("no log line containing %q within %v; got:\n%s", sub, d, r)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// handler formats a record as one line and hands it to out; attrs are
// those of WithAttrs, already formatted, prefix the group names of
// WithGroup.
type handler struct {
	out    func(line string)
	attrs  string
	prefix string
}

func (h *handler) Enabled(context.Context, slog.Level) bool { return true }

func (h *handler) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	b.WriteString(rec.Level.String())
	b.WriteByte(' ')
	b.WriteString(rec.Message)
	b.WriteString(h.attrs)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s%s=%v", h.prefix, a.Key, a.Value)
		return true
	})
	h.out(b.String())
	return nil
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	n := *h
	for _, a := range as {
		n.attrs += fmt.Sprintf(" %s%s=%v", h.prefix, a.Key, a.Value)
	}
	return &n
}

func (h *handler) WithGroup(name string) slog.Handler {
	n := *h
	n.prefix += name + "."
	return &n
}
