package tcp

import (
	"math/bits"
	"sync"
)

// Pooled buffers for messages that arrive before their receive, in
// power-of-two size classes from 4 KiB.
var bufPools [64]sync.Pool

func bufClass(n int) int { return max(12, bits.Len(uint(n-1))) }

func getBuf(n int) *[]byte {
	if n == 0 {
		return nil
	}
	c := bufClass(n)
	if v := bufPools[c].Get(); v != nil {
		return v.(*[]byte)
	}
	b := make([]byte, 1<<c)
	return &b
}

func putBuf(b *[]byte) {
	if b == nil {
		return
	}
	bufPools[bufClass(len(*b))].Put(b)
}

// spareMin is the smallest buffer an endpoint keeps in its spare slots
// rather than returning it to the shared pool, which the garbage collector
// empties: large buffers are costly to fault in again.
const spareMin = 64 << 10

// spareSlots is how many large buffers an endpoint keeps (reads in flight).
const spareSlots = 8

// smallClasses and smallSlots size an endpoint's own stock of buffers
// below spareMin: smallSlots of each class from 4 to 32 KiB (240 KiB at
// most). The shared pool alone missed 2-4 times in 300 small calls over
// TCP (a buffer put back on one processor's private slot is out of reach
// of the others, and the garbage collector empties the pool), each miss
// an allocation in a steady state that should have none.
const (
	smallClasses = 4
	smallSlots   = 4
)

type spares struct {
	mu    sync.Mutex
	bufs  [spareSlots]*[]byte
	small [smallClasses]struct {
		n    int
		bufs [smallSlots]*[]byte
	}
}

func (e *endpoint) getBuf(n int) *[]byte {
	if n > 0 && n < spareMin {
		if c := bufClass(n) - 12; c < smallClasses {
			s := &e.spares
			s.mu.Lock()
			if k := &s.small[c]; k.n > 0 {
				k.n--
				b := k.bufs[k.n]
				k.bufs[k.n] = nil
				s.mu.Unlock()
				return b
			}
			s.mu.Unlock()
		}
	}
	if n >= spareMin {
		s := &e.spares
		s.mu.Lock()
		for i, b := range s.bufs {
			if b != nil && len(*b) >= n {
				s.bufs[i] = nil
				s.mu.Unlock()
				return b
			}
		}
		s.mu.Unlock()
	}
	return getBuf(n)
}

func (e *endpoint) putBuf(b *[]byte) {
	if b == nil {
		return
	}
	s := &e.spares
	if len(*b) < spareMin {
		if c := bufClass(len(*b)) - 12; c < smallClasses {
			s.mu.Lock()
			if k := &s.small[c]; k.n < smallSlots {
				k.bufs[k.n] = b
				k.n++
				s.mu.Unlock()
				return
			}
			s.mu.Unlock()
		}
		putBuf(b)
		return
	}
	s.mu.Lock()
	small := 0
	for i, o := range s.bufs {
		if o == nil {
			s.bufs[i] = b
			s.mu.Unlock()
			return
		}
		if len(*o) < len(*s.bufs[small]) {
			small = i
		}
	}
	// Full: keep the larger of b and the smallest kept one.
	if len(*s.bufs[small]) < len(*b) {
		b, s.bufs[small] = s.bufs[small], b
	}
	s.mu.Unlock()
	putBuf(b)
}
