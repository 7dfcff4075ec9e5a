package comm

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHoistScanHoldsBack: the walk of the queue for Sends to run ahead of
// a waiting call (hoistScan) takes a Send only if nothing before it sends
// to the same rank: not the waiting call itself when it is a Send (it
// waits for room in the mailbox and has not posted: a Send taken ahead of
// it would take its place and be overwritten by it), not an earlier
// queued Send or SendRecv, nor the request the worker holds while an
// inline call waits; it stops at a collective, and passes receives and
// sends to other ranks.
func TestHoistScanHoldsBack(t *testing.T) {
	send := func(peer int) *Request { return &Request{kind: collSend, args: callArgs{peer: peer}} }
	recv := func(src int) *Request { return &Request{kind: collRecv, args: callArgs{src: src}} }
	for _, tc := range []struct {
		name    string
		waiting *Request
		active  *Request // the worker's, if not the waiting call
		queue   []*Request
		want    []int // indexes in queue of the Sends taken
	}{
		{"a waiting Recv", recv(1), nil, []*Request{send(1), send(2)}, []int{0, 1}},
		{"a waiting Send to the same rank", send(1), nil, []*Request{send(1), send(2)}, []int{1}},
		{"an earlier queued Send", recv(2), nil, []*Request{send(1), send(1), send(2)}, []int{0, 1, 2}},
		{"a SendRecv", recv(2), nil, []*Request{{kind: collSendRecv, args: callArgs{peer: 1, src: 1}}, send(1), send(2)}, []int{2}},
		{"the worker's request", recv(2), send(1), []*Request{send(1), send(2)}, []int{1}},
		{"a collective", recv(1), nil, []*Request{send(2), {kind: collBarrier}, send(3)}, []int{0}},
		{"a Send to itself", recv(1), nil, []*Request{send(0), send(2)}, []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Comm{rank: 0, size: 4}
			c.callQueue = newCallQueue()
			c.active = tc.waiting
			if tc.active != nil {
				c.active = tc.active
			}
			for _, r := range tc.queue {
				c.pushLocked(r)
			}
			// "an earlier queued Send": the second Send to rank 1 is
			// taken only because the first is (take says yes to all).
			run, _ := c.hoistScan(tc.waiting, true, func(*Request, int) bool { return true })
			var got []int
			for x := run; x != nil; x = x.next {
				for i, q := range tc.queue {
					if q == x {
						got = append(got, i)
					}
				}
			}
			require.Equal(t, tc.want, got)
			require.EqualValues(t, countSends(tc.queue)-int64(len(got)), c.sendsQueued.Load())
		})
	}
	// A Send the take function refuses holds the later ones to its rank.
	c := &Comm{rank: 0, size: 4}
	c.callQueue = newCallQueue()
	q := []*Request{send(1), send(1), send(2)}
	for _, r := range q {
		c.pushLocked(r)
	}
	run, _ := c.hoistScan(recv(3), true, func(x *Request, _ int) bool { return x != q[0] })
	require.Same(t, q[2], run)
	require.Nil(t, run.next)
}

func countSends(q []*Request) int64 {
	n := int64(0)
	for _, r := range q {
		if r.kind == collSend {
			n++
		}
	}
	return n
}
