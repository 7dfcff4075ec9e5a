// Package ratelog throttles repetitive log lines with counts, so that a
// flood of events (a port scanner, a crashed peer reconnecting in a loop, a
// rank started with the wrong secret) cannot bury everything else in the
// log, and nothing is silently dropped either.
//
// A Limiter tracks events per key (what the lines are about: the remote
// address without its port, say). The first Burst events of a key are let
// through, to be logged in full by the caller. Further events of that key
// are counted, and once per Interval the Limiter reports the count as a
// Summary ("195 more refused connections from 10.0.0.7 in the last 10s"),
// for as long as they keep coming. A key with nothing suppressed for a whole
// interval starts afresh. Stop reports whatever is still counted.
//
// Use:
//
//	lim := ratelog.New(5, 10*time.Second, func(s ratelog.Summary) {
//		logf("%d more connections refused from %s in the last %s", s.Suppressed, s.Key, s.Span.Round(time.Second))
//	})
//	defer lim.Stop()
//	...
//	if lim.Allow(remoteIP) {
//		logf("refused connection from %s: %v", remote, err)
//	}
package ratelog

import (
	"sort"
	"sync"
	"time"
)

// Others is the key under which a Limiter counts the events of keys beyond
// its MaxKeys: a flood from many addresses at once shares one budget and
// one summary line.
const Others = "other sources"

// MaxKeys is how many keys a Limiter tracks at once before it counts new
// keys' events under Others. It bounds the Limiter's memory whatever the
// flood.
const MaxKeys = 64

// A Summary counts the events of one key that Allow refused.
type Summary struct {
	Key        string        // the key given to Allow, or Others
	Suppressed int           // events refused since the last summary (at least 1)
	Span       time.Duration // the time they arrived in: from the window's start to the report
}

// A Limiter decides which events of a kind are logged. Its methods are safe
// for concurrent use. The zero value is not usable; call New.
type Limiter struct {
	burst    int
	interval time.Duration
	report   func(Summary)

	reportMu sync.Mutex // held while summaries are reported; orders Stop after a tick
	mu       sync.Mutex
	keys     map[string]*window
	timer    *time.Timer // armed while keys is not empty
	stopped  bool
}

// window is one key's state in the current interval.
type window struct {
	start      time.Time
	allowed    int // events let through since the key (re)started; stays at burst while it floods
	suppressed int // events refused in this window
}

// New returns a Limiter that lets burst events per key through, then
// reports the rest once per interval with report. report is called from a
// timer's goroutine (and from Stop), never with the Limiter's lock held, one
// summary at a time, in key order within one interval. burst below 1 counts
// as 1; interval must be positive.
func New(burst int, interval time.Duration, report func(Summary)) *Limiter {
	if interval <= 0 {
		panic("ratelog: interval must be positive")
	}
	return &Limiter{burst: max(burst, 1), interval: interval, report: report, keys: make(map[string]*window)}
}

// Allow records an event of key and reports whether to log it. It never
// blocks on the report function. After Stop it always returns true: a
// stopped Limiter throttles nothing and counts nothing.
func (l *Limiter) Allow(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return true
	}
	w := l.keys[key]
	if w == nil {
		if len(l.keys) >= MaxKeys {
			key = Others
			w = l.keys[key]
		}
		if w == nil {
			w = &window{start: time.Now()}
			l.keys[key] = w
			if l.timer == nil {
				// Every other window started earlier: the timer, when
				// armed, is already due first.
				l.timer = time.AfterFunc(l.interval, l.tick)
			}
		}
	}
	if w.allowed < l.burst {
		w.allowed++
		return true
	}
	w.suppressed++
	return false
}

// tick closes the windows that are due: a window with suppressed events is
// reported and begins again, one without is forgotten.
func (l *Limiter) tick() {
	l.reportMu.Lock()
	defer l.reportMu.Unlock()
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return
	}
	now := time.Now()
	var due []Summary
	var next time.Time
	for k, w := range l.keys {
		end := w.start.Add(l.interval)
		if end.After(now) {
			if next.IsZero() || end.Before(next) {
				next = end
			}
			continue
		}
		if w.suppressed == 0 {
			delete(l.keys, k)
			continue
		}
		due = append(due, Summary{Key: k, Suppressed: w.suppressed, Span: now.Sub(w.start)})
		w.start, w.suppressed = now, 0
		if end := now.Add(l.interval); next.IsZero() || end.Before(next) {
			next = end
		}
	}
	l.timer = nil
	if !next.IsZero() {
		l.timer = time.AfterFunc(next.Sub(now), l.tick)
	}
	l.mu.Unlock()
	l.emit(due)
}

// Stop reports every count not yet reported and stops the Limiter's timer.
// When it returns, no report is running and none will follow. It is
// idempotent.
func (l *Limiter) Stop() {
	l.reportMu.Lock()
	defer l.reportMu.Unlock()
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return
	}
	l.stopped = true
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	now := time.Now()
	var due []Summary
	for k, w := range l.keys {
		if w.suppressed > 0 {
			due = append(due, Summary{Key: k, Suppressed: w.suppressed, Span: now.Sub(w.start)})
		}
	}
	l.keys = nil
	l.mu.Unlock()
	l.emit(due)
}

func (l *Limiter) emit(due []Summary) {
	sort.Slice(due, func(i, j int) bool { return due[i].Key < due[j].Key })
	for _, s := range due {
		l.report(s)
	}
}
