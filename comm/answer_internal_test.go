package comm

import (
	"context"
	"strings"
	"testing"
	"time"
)

// slowNext is a store whose Set of a responder's "next" key past the
// first takes delay: the responder's goroutine descheduled between two
// store operations, as it is with 128 ranks on 2 cores.
type slowNext struct {
	keyValue
	delay time.Duration
}

func (s slowNext) Set(ctx context.Context, key string, v []byte) error {
	if strings.HasSuffix(key, "/next") && string(v) != "1" {
		time.Sleep(s.delay)
	}
	return s.keyValue.Set(ctx, key, v)
}

// A rank's answer to the stall diagnosis is never older than the question:
// a rank that asks right after another (its question comes while the
// responder, which answered the first, has not moved on yet) still gets
// the state after the change in between, not the first answer. Before, a
// rank that had moved on to collective #8 answered "stalled in #7", and
// its peer, stalled in #8 waiting on it, declared a sequence mismatch.
func TestAnswerNotOlderThanQuestion(t *testing.T) {
	kv := NewLocalGroup(2).Member(0).(keyValue)
	c := &Comm{id: "t", rank: 1, stallWatch: stallWatch{respDone: make(chan struct{})}}
	c.failRoot.Store(noRoot)
	c.seqNow.Store(7)
	c.callNo.Store(1) // running
	ctx, cancel := context.WithCancel(context.Background())
	go c.respond(ctx, slowNext{kv, 300 * time.Millisecond})
	defer func() { cancel(); <-c.respDone }()
	ask := func() rankState {
		t.Helper()
		qctx, qcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer qcancel()
		a, ok := c.query(qctx, kv, []int{1})[1]
		if !ok {
			t.Fatal("no answer")
		}
		return a
	}
	if a := ask(); a.seq != 7 || !a.running {
		t.Fatalf("first answer: collective #%d, running %v; want #7, running", a.seq, a.running)
	}
	c.callNo.Store(3) // finished #7, started #8
	c.seqNow.Store(8)
	if a := ask(); a.seq != 8 {
		t.Errorf("answer after the rank moved on to #8 says #%d", a.seq)
	}
}
