package shm

import (
	"encoding/binary"
	"log/slog"
	"testing"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

// Every decoder of bytes a peer controls is fuzzed: the address blob, the
// control frames, the ring's record headers, and a whole ring consumed by
// an endpoint.

func FuzzDecodeAddress(f *testing.F) {
	good := (&address{pid: 42, host: [16]byte{1}, device: [16]byte{2}, token: [16]byte{3}}).encode()
	f.Add(good)
	f.Add(good[:20])
	f.Add([]byte{})
	bad := append([]byte(nil), good...)
	bad[3] = 9
	f.Add(bad)
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := decodeAddress(b)
		if err != nil {
			return
		}
		again, err := decodeAddress(a.encode())
		if err != nil || again != a {
			t.Fatalf("round trip of %x: %+v, %v", b, again, err)
		}
	})
}

func FuzzDecodeFrame(f *testing.F) {
	for _, fr := range []frame{
		{typ: frameHello, dst: [16]byte{1}, src: [16]byte{2}, dev: [16]byte{3}, a32: 7},
		{typ: frameHelloAck, status: helloOK},
		{typ: frameSetup, a32: 1, a: 1 << 14, b: 4096, c: 64, d: 0xdead, e: 1 << 16},
		{typ: frameSegment, a: 3, b: 1 << 20},
		{typ: frameForget, a: 3},
		{typ: frameWant, a: 3},
		{typ: frameNudge},
		{typ: frameBye, status: byeRemoteAccess, kind: opWrite, reason: reasonBounds, hasSeq: true, a: 5, b: 6, c: 7, d: 8, e: 9},
	} {
		var b [frameSize]byte
		fr.encode(&b)
		f.Add(b[:])
	}
	f.Add([]byte("gcsf"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var fr frame
		if decodeFrame(b, &fr) != nil {
			return
		}
		var again [frameSize]byte
		fr.encode(&again)
		var fr2 frame
		if err := decodeFrame(again[:], &fr2); err != nil || fr2 != fr {
			t.Fatalf("round trip of %x: %+v, %v", b, fr2, err)
		}
	})
}

func FuzzDecodeRecord(f *testing.F) {
	for _, r := range []record{
		{kind: recSend, flags: flagFirst | flagLast, cells: 2, n: 8, total: 8},
		{kind: recImm, cells: 1, imm: 5, total: 100},
		{kind: recWrite, flags: flagFirst | flagLast | flagImm, cells: 3, n: 100, total: 100, key: 1 << 20, off: 64},
		{kind: recReadReq, cells: 1, total: 4096, key: 9, off: 0, seq: 1},
		{kind: recReadData, flags: flagLast, cells: 65, n: 4096, seq: 1},
		{kind: recPad, cells: 100},
	} {
		b := make([]byte, headerSize)
		r.encode(b)
		f.Add(b, uint64(128), uint32(1<<16))
	}
	f.Fuzz(func(t *testing.T, b []byte, room uint64, maxPayload uint32) {
		var r record
		if decodeRecord(b, room, maxPayload, &r) != nil {
			return
		}
		if uint64(r.cells) > room || (r.kind != recPad && r.cells != 1+payloadCells(int(r.n))) || r.n > maxPayload && r.kind != recPad {
			t.Fatalf("accepted %+v with room %d, max payload %d", r, room, maxPayload)
		}
	})
}

// FuzzPeerRing writes arbitrary bytes into one endpoint's ring (as a
// hostile or broken peer could) and lets the other consume it: it must
// never panic, and whatever it does not understand fails the connection.
// With fix set, the key field of every cell is replaced by a live key of
// the consumer, so that the fuzzer reaches the placement code.
func FuzzPeerRing(f *testing.F) {
	rec := func(rs ...record) []byte {
		var b []byte
		for _, r := range rs {
			cell := make([]byte, int(r.cells)*cellSize)
			r.encode(cell)
			b = append(b, cell...)
		}
		return b
	}
	f.Add(rec(record{kind: recSend, flags: flagFirst | flagLast, cells: 2, n: 8, total: 8}), uint64(2), true)
	f.Add(rec(record{kind: recImm, cells: 1, imm: 1, total: 8}, record{kind: recImm, cells: 1, imm: 2, total: 8}), uint64(2), false)
	f.Add(rec(record{kind: recWrite, flags: flagFirst | flagLast | flagImm, cells: 2, n: 16, total: 16, off: 8}), uint64(2), true)
	f.Add(rec(record{kind: recReadReq, cells: 1, total: 64, off: 0, seq: 0}), uint64(1), true)
	f.Add(rec(record{kind: recReadData, flags: flagLast, cells: 2, n: 8, seq: 0}), uint64(2), false)
	f.Add(rec(record{kind: recReadData, flags: flagLast, cells: 2, n: 8, seq: 0}), uint64(2|1<<63), false)
	f.Add(rec(record{kind: recSend, flags: flagFirst | flagLast, cells: 2, n: 8, total: 8}), uint64(2|1<<63), false)
	f.Add(rec(record{kind: recSend, flags: flagFirst, cells: 2, n: 8, total: 16}, record{kind: recImm, cells: 1}), uint64(3), false)
	f.Add(rec(record{kind: recPad, cells: 1}), uint64(1<<40), false)
	f.Fuzz(func(t *testing.T, cells []byte, tail uint64, fix bool) {
		answers := tail&(1<<63) != 0 // the top bit picks the answer ring
		tail &^= 1 << 63
		o := Options{RingSize: 64 << 10, noSelf: true, DisableCMA: true, Logger: slog.New(slog.DiscardHandler)}
		p := inProcessPair(t, o, o)
		a, b := p.A.(*endpoint), p.B.(*endpoint)
		buf := make([]byte, 4096)
		rb := transporttest.Register(t, p.DevB, buf, transport.AccessAll)
		for i := range 2 {
			if err := p.B.PostRecv(uint64(i), rb, 0, 64); err != nil {
				t.Fatal(err)
			}
		}
		r := a.out.ring
		if answers {
			r = a.outAns.ring
		}
		ring := r.cells
		if len(cells) > len(ring) {
			cells = cells[:len(ring)]
		}
		copy(ring, cells)
		if fix {
			for off := 0; off+32 <= len(cells); off += cellSize {
				binary.LittleEndian.PutUint64(ring[off+24:], rb.Remote().Key)
			}
		}
		r.tail.Store(tail)
		b.runRx()
		b.runTx()
		b.complete()
	})
}
