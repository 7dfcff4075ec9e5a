package tcp

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestQueuesStartWithRoom: a burst of frames longer than any before it
// (credits, acknowledgements and chunks of several calls in flight) must
// not allocate in the middle of a caller's steady state. The frame queue,
// the frames taken from it, a batch's segments and a sleeper's poll list
// start with room for such a burst instead of growing to each new record:
// before, a memory profile of comm's TestSteadyStateAllocatesNothing put
// 4-7 allocations in the windows of 60 large calls at these slices (its
// CI failures, 7 allocations, turned out to be the runtime starting a
// thread; see spareThreads there).
func TestQueuesStartWithRoom(t *testing.T) {
	d, err := NewDevice(testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// Each run takes fresh ones (AllocsPerRun runs once more to warm up).
	const runs = 10
	type fresh struct {
		e *endpoint
		l *lane
		p *parker
	}
	var set []fresh
	for range runs + 1 {
		f := fresh{newEndpoint(d, nil, [16]byte{1}), new(lane), new(parker)}
		f.l.tx.init()
		f.p.init()
		defer f.p.close()
		set = append(set, f)
	}
	allocs := testing.AllocsPerRun(runs, func() {
		e, l, p := set[0].e, set[0].l, set[0].p
		set = set[1:]
		for range queueCap {
			e.queueLocked(outItem{h: header{typ: msgSend}})
		}
		// The lane takes the queue and hands its own slice back.
		l.tx.pend, e.outq = e.outq, l.tx.pend[:0]
		for range queueCap {
			e.queueLocked(outItem{h: header{typ: msgSend}})
		}
		for range maxIov {
			l.tx.segs = append(l.tx.segs, txSeg{})
		}
		for range parkFds {
			p.fds = append(p.fds, unix.PollFd{})
			p.lanes = append(p.lanes, nil)
		}
	})
	if allocs != 0 {
		t.Fatalf("a first burst of %d frames, %d segments and %d polled sockets allocated %.0f times, want 0", queueCap, maxIov, parkFds, allocs)
	}
}
