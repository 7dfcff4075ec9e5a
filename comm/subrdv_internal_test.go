package comm

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSubRendezvousMemberGone: a sub-communicator's rendezvous waiting
// for a member whose process is gone (its marker set in the store) fails
// at once naming it, instead of at the caller's deadline.
func TestSubRendezvousMemberGone(t *testing.T) {
	kv := NewLocalGroup(1).Member(0).(*localMember)
	gone := func(w int) string { return "goccl/gone/" + strconv.Itoa(w) }
	s := &subRendezvous{kv: kv, id: "world/split1/color0", rank: 0, size: 2, gone: gone, world: []int{3, 5}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() {
		time.Sleep(50 * time.Millisecond)
		kv.Set(ctx, gone(5), []byte("rank 5 (pid 9 on h) lost the store"))
	}()
	start := time.Now()
	_, err := s.Allgather(ctx, []byte("x"))
	if err == nil || !strings.Contains(err.Error(), "rank 1 is gone: rank 5 (pid 9 on h)") {
		t.Fatalf("Allgather with member 1 (world rank 5) gone: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the wait took %v", d)
	}
}
