package transporttest

import (
	"encoding/binary"
	"fmt"
	"sync"
	"testing"

	"github.com/goccl/goccl/transport"
)

// outstanding is how many requests of one kind the suite keeps in flight.
const outstanding = 256

// testManyOutstanding posts 256 requests of each kind before waiting for any.
func testManyOutstanding(t *testing.T, f Factory) {
	const n = 4096
	t.Run("SendRecv", func(t *testing.T) {
		p := NewPair(t, f)
		src := Pattern(outstanding*n, 11)
		dst := make([]byte, outstanding*n)
		rs := Register(t, p.DevA, src, 0)
		rd := Register(t, p.DevB, dst, transport.AccessLocalWrite)
		for i := range outstanding {
			if err := p.B.PostRecv(uint64(i), rd, i*n, n); err != nil {
				t.Fatalf("post recv %d: %v", i, err)
			}
		}
		for i := range outstanding {
			if err := p.A.PostSend(uint64(i), rs, i*n, n); err != nil {
				t.Fatalf("post send %d: %v", i, err)
			}
		}
		for i, c := range WaitN(t, p.CQB, outstanding, ShortTimeout) {
			ExpectOK(t, c, transport.OpRecv, uint64(i), n)
		}
		for i, c := range WaitN(t, p.CQA, outstanding, ShortTimeout) {
			ExpectOK(t, c, transport.OpSend, uint64(i), n)
		}
		ExpectBytes(t, "received", dst, src)
	})
	t.Run("Write", func(t *testing.T) {
		p := NewPair(t, f)
		src := Pattern(outstanding*n, 12)
		win := make([]byte, outstanding*n)
		rs := Register(t, p.DevA, src, 0)
		rw := Register(t, p.DevB, win, transport.AccessRemoteWrite)
		for i := range outstanding {
			// Reverse order of offsets, so that placement by offset alone
			// cannot hide a mix-up.
			j := outstanding - 1 - i
			if err := p.A.PostWrite(uint64(i), rs, j*n, n, rw.Remote(), uint64(j*n), nil); err != nil {
				t.Fatalf("post write %d: %v", i, err)
			}
		}
		for i, c := range WaitN(t, p.CQA, outstanding, ShortTimeout) {
			ExpectOK(t, c, transport.OpWrite, uint64(i), n)
		}
		ExpectBytes(t, "written", win, src)
		ExpectEmpty(t, p.CQB)
	})
	t.Run("Read", func(t *testing.T) {
		p := NewPair(t, f)
		remote := Pattern(outstanding*n, 13)
		local := make([]byte, outstanding*n)
		rr := Register(t, p.DevB, remote, transport.AccessRemoteRead)
		rl := Register(t, p.DevA, local, transport.AccessLocalWrite)
		for i := range outstanding {
			j := (i * 7) % outstanding
			if err := p.A.PostRead(uint64(i), rl, j*n, n, rr.Remote(), uint64(j*n)); err != nil {
				t.Fatalf("post read %d: %v", i, err)
			}
		}
		for i, c := range WaitN(t, p.CQA, outstanding, ShortTimeout) {
			ExpectOK(t, c, transport.OpRead, uint64(i), n)
		}
		ExpectBytes(t, "read", local, remote)
	})
}

// testLarge moves 64 MiB with each of send/recv, write and read.
func testLarge(t *testing.T, f Factory) {
	x, y := bigBuffers(t)
	p := NewPair(t, f)
	rx := Register(t, p.DevA, x, transport.AccessAll)
	ry := Register(t, p.DevB, y, transport.AccessAll)
	t.Run("SendRecv", func(t *testing.T) {
		Fill(x, 14)
		clear(y)
		if err := p.B.PostRecv(1, ry, 0, BigSize); err != nil {
			t.Fatalf("post recv: %v", err)
		}
		if err := p.A.PostSend(2, rx, 0, BigSize); err != nil {
			t.Fatalf("post send: %v", err)
		}
		ExpectOK(t, WaitOne(t, p.CQB, LargeTimeout), transport.OpRecv, 1, BigSize)
		ExpectOK(t, WaitOne(t, p.CQA, LargeTimeout), transport.OpSend, 2, BigSize)
		ExpectBytes(t, "64 MiB message", y, x)
	})
	t.Run("Write", func(t *testing.T) {
		Fill(x, 15)
		clear(y)
		if err := p.A.PostWrite(3, rx, 0, BigSize, ry.Remote(), 0, nil); err != nil {
			t.Fatalf("post write: %v", err)
		}
		ExpectOK(t, WaitOne(t, p.CQA, LargeTimeout), transport.OpWrite, 3, BigSize)
		ExpectBytes(t, "64 MiB write", y, x)
	})
	t.Run("Read", func(t *testing.T) {
		Fill(y, 16)
		clear(x)
		if err := p.A.PostRead(4, rx, 0, BigSize, ry.Remote(), 0); err != nil {
			t.Fatalf("post read: %v", err)
		}
		ExpectOK(t, WaitOne(t, p.CQA, LargeTimeout), transport.OpRead, 4, BigSize)
		ExpectBytes(t, "64 MiB read", x, y)
	})
	t.Run("WriteImmChunks", func(t *testing.T) {
		// A pipelined transfer as a collective does it: 16 chunks of 4 MiB,
		// each announced with its index.
		const chunks = 16
		const c = BigSize / chunks
		Fill(x, 17)
		clear(y)
		for i := range chunks {
			if err := p.B.PostRecv(uint64(10+i), ry, 0, 0); err != nil {
				t.Fatalf("post recv: %v", err)
			}
		}
		for i := range chunks {
			imm := uint32(i)
			if err := p.A.PostWrite(uint64(10+i), rx, i*c, c, ry.Remote(), uint64(i*c), &imm); err != nil {
				t.Fatalf("post write %d: %v", i, err)
			}
		}
		for i, cmp := range WaitN(t, p.CQB, chunks, LargeTimeout) {
			ExpectOK(t, cmp, transport.OpRecv, uint64(10+i), c)
			if !cmp.HasImm || cmp.Imm != uint32(i) {
				t.Fatalf("chunk %d: %s", i, describe(cmp))
			}
			ExpectBytes(t, fmt.Sprintf("chunk %d", i), y[i*c:(i+1)*c], x[i*c:(i+1)*c])
		}
		WaitN(t, p.CQA, chunks, LargeTimeout)
	})
}

// testConcurrent posts from several goroutines at once on both sides: sends
// from each goroutine arrive in that goroutine's order, and writes and reads
// posted concurrently complete with the right data.
func testConcurrent(t *testing.T, f Factory) {
	p := NewPair(t, f)
	const goroutines, perG, msg = 4, 200, 64
	const total = goroutines * perG
	src := make([]byte, total*msg)
	dst := make([]byte, total*msg)
	rs := Register(t, p.DevA, src, 0)
	rd := Register(t, p.DevB, dst, transport.AccessLocalWrite)
	// Writes and reads go through a window on B.
	const wn = 1024
	wsrc := Pattern(goroutines*perG*wn/4, 18)
	wback := make([]byte, len(wsrc))
	win := make([]byte, len(wsrc))
	rws := Register(t, p.DevA, wsrc, 0)
	rwb := Register(t, p.DevA, wback, transport.AccessLocalWrite)
	rw := Register(t, p.DevB, win, transport.AccessRemoteWrite|transport.AccessRemoteRead)
	for g := range goroutines {
		for s := range perG {
			i := g*perG + s
			binary.LittleEndian.PutUint64(src[i*msg:], uint64(g)<<32|uint64(s))
			Fill(src[i*msg+8:(i+1)*msg], uint64(i))
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4*goroutines+1)
	// B posts its receives from one goroutine while A posts.
	wg.Go(func() {
		for i := range total {
			if err := p.B.PostRecv(uint64(i), rd, i*msg, msg); err != nil {
				errs <- fmt.Errorf("post recv %d: %v", i, err)
				return
			}
		}
	})
	for g := range goroutines {
		wg.Go(func() {
			for s := range perG {
				i := g*perG + s
				if err := p.A.PostSend(uint64(g)<<32|uint64(s), rs, i*msg, msg); err != nil {
					errs <- fmt.Errorf("goroutine %d: post send %d: %v", g, s, err)
					return
				}
			}
		})
	}
	// Each of these goroutines writes its own quarter of the window and
	// reads each piece back after writing it.
	const wq = goroutines * perG * wn / 4 / goroutines
	for g := range goroutines {
		wg.Go(func() {
			for k := range wq / wn {
				off := g*wq + k*wn
				id := 1<<62 | uint64(off)
				if err := p.A.PostWrite(id, rws, off, wn, rw.Remote(), uint64(off), nil); err != nil {
					errs <- fmt.Errorf("goroutine %d: post write: %v", g, err)
					return
				}
				if err := p.A.PostRead(id|1<<61, rwb, off, wn, rw.Remote(), uint64(off)); err != nil {
					errs <- fmt.Errorf("goroutine %d: post read: %v", g, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	const rdma = 2 * goroutines * (wq / wn)
	recvs := WaitN(t, p.CQB, total, ShortTimeout)
	local := ByID(t, WaitN(t, p.CQA, total+rdma, ShortTimeout))
	next := make([]uint64, goroutines)
	for k, c := range recvs {
		ExpectOK(t, c, transport.OpRecv, uint64(k), msg)
		h := binary.LittleEndian.Uint64(dst[k*msg:])
		g, s := h>>32, h&0xffffffff
		if g >= goroutines || s != next[g] {
			t.Fatalf("receive %d holds message %d of goroutine %d; want message %d of that goroutine next", k, s, g, next[min(g, goroutines-1)])
		}
		next[g]++
		i := int(g)*perG + int(s)
		ExpectBytes(t, fmt.Sprintf("message %d of goroutine %d", s, g), dst[k*msg:(k+1)*msg], src[i*msg:(i+1)*msg])
	}
	for id, c := range local {
		switch {
		case id&(1<<62) == 0:
			ExpectOK(t, c, transport.OpSend, id, msg)
		case id&(1<<61) == 0:
			ExpectOK(t, c, transport.OpWrite, id, wn)
		default:
			ExpectOK(t, c, transport.OpRead, id, wn)
		}
	}
	ExpectBytes(t, "written window", win, wsrc)
	ExpectBytes(t, "window read back", wback, wsrc)
}

// testBidirectional has both sides send large messages and write to each
// other at the same time, which deadlocks a transport that holds one
// direction while serving the other.
func testBidirectional(t *testing.T, f Factory) {
	p := NewPair(t, f)
	const count, n = 32, 256 << 10
	type side struct {
		dev      transport.Device
		ep       transport.Endpoint
		cq       transport.CompletionQueue
		src, dst []byte
		rs, rd   transport.Region
	}
	sides := []*side{{dev: p.DevA, ep: p.A, cq: p.CQA}, {dev: p.DevB, ep: p.B, cq: p.CQB}}
	for i, s := range sides {
		s.src = Pattern(count*n, uint64(20+i))
		s.dst = make([]byte, 2*count*n)
		s.rs = Register(t, s.dev, s.src, 0)
		s.rd = Register(t, s.dev, s.dst, transport.AccessLocalWrite|transport.AccessRemoteWrite)
	}
	for _, s := range sides {
		for i := range count {
			if err := s.ep.PostRecv(uint64(i), s.rd, i*n, n); err != nil {
				t.Fatalf("post recv: %v", err)
			}
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for i, s := range sides {
		peer := sides[1-i]
		wg.Go(func() {
			for k := range count {
				if err := s.ep.PostSend(uint64(1000+k), s.rs, k*n, n); err != nil {
					errs <- err
					return
				}
				if err := s.ep.PostWrite(uint64(2000+k), s.rs, k*n, n, peer.rd.Remote(), uint64((count+k)*n), nil); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("post: %v", err)
	}
	// Collect both sides before looking at memory: a side's window is
	// complete when the peer's writes have completed, on the peer's queue.
	all := make([]map[uint64]transport.Completion, 2)
	for i, s := range sides {
		all[i] = ByID(t, WaitN(t, s.cq, 3*count, LargeTimeout))
	}
	for i, s := range sides {
		peer := sides[1-i]
		cs := all[i]
		for k := range count {
			ExpectOK(t, cs[uint64(k)], transport.OpRecv, uint64(k), n)
			ExpectOK(t, cs[uint64(1000+k)], transport.OpSend, uint64(1000+k), n)
			ExpectOK(t, cs[uint64(2000+k)], transport.OpWrite, uint64(2000+k), n)
		}
		ExpectBytes(t, fmt.Sprintf("side %d messages", i), s.dst[:count*n], peer.src)
		ExpectBytes(t, fmt.Sprintf("side %d window", i), s.dst[count*n:], peer.src)
	}
}
