package mem

import (
	"sync"

	"github.com/goccl/goccl/transport"
)

// request is one posted work request.
type request struct {
	id     uint64
	op     transport.Op
	buf    []byte // the local bytes
	remote transport.RemoteRegion
	roff   uint64
	imm    uint32
	hasImm bool
}

var requests = sync.Pool{New: func() any { return new(request) }}

func newRequest(id uint64, op transport.Op, buf []byte) *request {
	r := requests.Get().(*request)
	r.id, r.op, r.buf = id, op, buf
	return r
}

func freeRequest(r *request) {
	*r = request{}
	requests.Put(r)
}

// queue is a FIFO of requests that reuses its storage once drained.
type queue struct {
	buf  []*request
	head int
}

func (q *queue) len() int { return len(q.buf) - q.head }

func (q *queue) push(r *request) { q.buf = append(q.buf, r) }

func (q *queue) pop() *request {
	r := q.buf[q.head]
	q.buf[q.head] = nil
	q.head++
	if q.head == len(q.buf) {
		q.buf = q.buf[:0]
		q.head = 0
	}
	return r
}

// drain removes and returns every request, in order.
func (q *queue) drain() []*request {
	if q.len() == 0 {
		return nil
	}
	out := append([]*request(nil), q.buf[q.head:]...)
	clear(q.buf)
	q.buf = q.buf[:0]
	q.head = 0
	return out
}
