package shm

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// A ring carries one direction of a connection: a single-producer,
// single-consumer queue of records in the producer's transmit segment,
// which the consumer maps. Its storage is cap cells of cellSize bytes;
// tail (written by the producer) and head (written by the consumer) count
// cells since the start and only grow. A record is a header cell followed
// by payload cells and never wraps: a record that does not fit before the
// end of the storage is preceded by a pad record that fills it.
//
// Ordering: the producer writes a record's cells, then stores tail; the
// consumer loads tail, then reads the cells; it copies what it needs out
// and then stores head, after which the producer may overwrite them. The
// atomics of sync/atomic are sequentially consistent, which orders the
// plain accesses to the cells on either side (acquire on load, release on
// store), across processes as within one.
//
// The consumer trusts nothing in the ring: the peer may write anything at
// any time. It copies a header out of shared memory once and checks it
// (decodeRecord) before acting on it, and bounds every copy by its own
// view of the storage.
const cellSize = 64

// Record kinds.
const (
	recPad      = 1 // filler up to the end of the storage
	recSend     = 2 // a message, or one chunk of it; payload follows
	recImm      = 3 // the immediate of a write whose data is already placed
	recWrite    = 4 // a chunk of a staged write; payload follows
	recReadReq  = 5 // a staged read: send me n bytes of key at off
	recReadData = 6 // a chunk of the answer to a staged read; payload follows
	recKinds    = 7
)

// Record flags.
const (
	flagFirst = 1 << iota // first chunk of a message
	flagLast              // last chunk of a message or of a staged write
	flagImm               // the last chunk of a staged write carries an immediate
	flagMask  = flagFirst | flagLast | flagImm
)

// The header, at the start of a record's first cell (little endian):
//
//	0  kind  uint8
//	1  flags uint8
//	2  -     uint16
//	4  cells uint32  cells of the record, header included
//	8  n     uint32  payload bytes in this record
//	12 imm   uint32
//	16 total uint64  send: message length; imm: bytes written; readReq: bytes asked
//	24 key   uint64  write, readReq: the target's key
//	32 off   uint64  send, readData: offset in the message or read; write, readReq: in the region
//	40 seq   uint64  readReq, readData: the read's sequence number
const headerSize = 48

type record struct {
	kind, flags uint8
	cells       uint32
	n           uint32
	imm         uint32
	total       uint64
	key         uint64
	off         uint64
	seq         uint64
}

// payloadCells is how many cells n payload bytes take.
func payloadCells(n int) uint32 { return uint32((n + cellSize - 1) / cellSize) }

func (r *record) encode(b []byte) {
	_ = b[headerSize-1]
	b[0], b[1], b[2], b[3] = r.kind, r.flags, 0, 0
	binary.LittleEndian.PutUint32(b[4:], r.cells)
	binary.LittleEndian.PutUint32(b[8:], r.n)
	binary.LittleEndian.PutUint32(b[12:], r.imm)
	binary.LittleEndian.PutUint64(b[16:], r.total)
	binary.LittleEndian.PutUint64(b[24:], r.key)
	binary.LittleEndian.PutUint64(b[32:], r.off)
	binary.LittleEndian.PutUint64(b[40:], r.seq)
}

// decodeRecord parses and checks a header copied out of the ring. room is
// how many cells the record may span (published and before the end of the
// storage); maxPayload bounds n. It never panics.
func decodeRecord(b []byte, room uint64, maxPayload uint32, r *record) error {
	if len(b) < headerSize {
		return fmt.Errorf("record header of %d bytes", len(b))
	}
	*r = record{
		kind:  b[0],
		flags: b[1],
		cells: binary.LittleEndian.Uint32(b[4:]),
		n:     binary.LittleEndian.Uint32(b[8:]),
		imm:   binary.LittleEndian.Uint32(b[12:]),
		total: binary.LittleEndian.Uint64(b[16:]),
		key:   binary.LittleEndian.Uint64(b[24:]),
		off:   binary.LittleEndian.Uint64(b[32:]),
		seq:   binary.LittleEndian.Uint64(b[40:]),
	}
	if r.kind == 0 || r.kind >= recKinds {
		return fmt.Errorf("record of unknown kind %d", r.kind)
	}
	if r.flags&^flagMask != 0 {
		return fmt.Errorf("record with unknown flags %#x", r.flags)
	}
	if r.cells == 0 || uint64(r.cells) > room {
		return fmt.Errorf("record of %d cells where %d are available", r.cells, room)
	}
	switch r.kind {
	case recPad:
		if r.n != 0 {
			return fmt.Errorf("pad record with %d payload bytes", r.n)
		}
		return nil
	case recSend, recWrite, recReadData:
		if r.n > maxPayload {
			return fmt.Errorf("record with %d payload bytes (limit %d)", r.n, maxPayload)
		}
	default:
		if r.n != 0 {
			return fmt.Errorf("%s record with %d payload bytes", kindName(r.kind), r.n)
		}
	}
	if r.cells != 1+payloadCells(int(r.n)) {
		return fmt.Errorf("record of %d cells for %d payload bytes", r.cells, r.n)
	}
	return nil
}

func kindName(k uint8) string {
	switch k {
	case recPad:
		return "pad"
	case recSend:
		return "send"
	case recImm:
		return "immediate"
	case recWrite:
		return "write"
	case recReadReq:
		return "read request"
	case recReadData:
		return "read data"
	}
	return fmt.Sprintf("kind %d", k)
}

// ring is one side's view of a ring.
type ring struct {
	tail  *atomic.Uint64 // in shared memory
	head  *atomic.Uint64 // in shared memory
	cells []byte         // cap*cellSize bytes of shared memory
	cap   uint64         // cells, a power of two
	// Race builds: this side's and the peer's clocks (see raceclock.go).
	mine, theirs *atomic.Uint64
}

func (r *ring) raceRelease() {
	if raceEnabled && r.mine != nil {
		r.mine.Add(1)
	}
}

func (r *ring) raceAcquire() {
	if raceEnabled && r.theirs != nil {
		r.theirs.Load()
	}
}

// requestRing and answerRing are the two rings of a transmit segment
// whose request ring has cells cells.
func requestRing(seg []byte, cells uint64) ring {
	return newRing(seg, txTail, txHead, txCells, cells)
}

func answerRing(seg []byte, cells uint64) ring {
	return newRing(seg, txAnsTail, txAnsHead, txCells+int(cells)*cellSize, ansCells(cells))
}

func newRing(seg []byte, tail, head, cells int, n uint64) ring {
	return ring{
		tail:  (*atomic.Uint64)(unsafe.Pointer(&seg[tail])),
		head:  (*atomic.Uint64)(unsafe.Pointer(&seg[head])),
		cells: seg[cells : cells+int(n)*cellSize],
		cap:   n,
	}
}

// cell returns the storage of cell pos (mod cap) and of the cells after it
// up to the end of the storage.
func (r *ring) cell(pos uint64) []byte {
	return r.cells[(pos&(r.cap-1))*cellSize:]
}

// producer is the producing side's state of a ring. It is used under the
// endpoint's transmit lock.
type producer struct {
	ring
	pos  uint64 // next free cell (the tail this side will publish)
	seen uint64 // the last head loaded
}

// reserve makes room for a record of cells cells at pos, writing a pad
// record first if the record would wrap. It reports false if the ring is
// full; then nothing was written. The consumer's head is loaded only when
// the cached value does not show enough room.
func (p *producer) reserve(cells uint32) bool {
	need := uint64(cells)
	toEnd := p.cap - p.pos&(p.cap-1)
	if need > toEnd {
		need += toEnd // a pad first
	}
	if p.cap-(p.pos-p.seen) < need {
		h := p.head.Load()
		p.raceAcquire()
		if h > p.pos || p.pos-h > p.cap {
			// A head the consumer cannot have written: treat as full;
			// the consumer's side detects the corruption.
			return false
		}
		p.seen = h
		if p.cap-(p.pos-p.seen) < need {
			return false
		}
	}
	if uint64(cells) > toEnd {
		pad := record{kind: recPad, cells: uint32(toEnd)}
		pad.encode(p.cell(p.pos))
		p.pos += toEnd
	}
	return true
}

// publish makes every record written since the last publish visible.
func (p *producer) publish() {
	p.raceRelease()
	p.tail.Store(p.pos)
}

// consumer is the consuming side's state of a ring, used under the
// endpoint's receive lock.
type consumer struct {
	ring
	pos        uint64 // next cell to read (the head this side will publish)
	maxPayload uint32
}

// next decodes the record at pos into r and returns its storage (header
// cell first). ok is false if no record is published; err is set for a
// malformed record or ring state.
func (c *consumer) next(r *record) (b []byte, ok bool, err error) {
	t := c.tail.Load()
	if t == c.pos {
		return nil, false, nil
	}
	c.raceAcquire()
	if t < c.pos || t-c.pos > c.cap {
		return nil, false, fmt.Errorf("ring tail %d against head %d (capacity %d cells)", t, c.pos, c.cap)
	}
	toEnd := c.cap - c.pos&(c.cap-1)
	room := min(t-c.pos, toEnd)
	cell := c.cell(c.pos)
	var hdr [headerSize]byte
	copy(hdr[:], cell) // once: the peer may change the ring under us
	if err := decodeRecord(hdr[:], room, c.maxPayload, r); err != nil {
		return nil, false, fmt.Errorf("at cell %d: %w", c.pos, err)
	}
	return cell[:uint64(r.cells)*cellSize], true, nil
}

// advance consumes r's cells; the head is stored by commit.
func (c *consumer) advance(r *record) { c.pos += uint64(r.cells) }

func (c *consumer) commit() {
	c.raceRelease()
	c.head.Store(c.pos)
}
