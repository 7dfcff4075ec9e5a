package shm

import (
	"encoding/binary"
	"sync/atomic"
	"time"
	"unsafe"
)

// Shared memory layouts.
//
// A device's control segment (one memfd per device, mapped by every peer):
//
//	part 1, read-write for peers (ctlBellsEnd(maxCQs) bytes):
//	  0          magic "goccl/c1", pid uint32, max CQs uint32, slots uint32
//	  64*(1+i)   the bell of completion queue i (seq uint32, waiters uint32)
//	part 2, read-only for peers, page aligned: the region table, one
//	  slotSize-byte slot per registration:
//	  0  state  uint64  slotLive while the key is valid
//	  8  key    uint64
//	  16 addr   uint64  the region's address in the owner (for CMA)
//	  24 len    uint64
//	  32 seg    uint64  the Alloc segment holding the region, 0 if none
//	  40 segOff uint64  the region's offset in that segment
//	  48 access uint32
//
// A transmit segment (one memfd per endpoint, written by its owner, the
// producer of the ring in it, and mapped read-write by the peer):
//
//	0     magic "goccl/t1", cells uint64 (of the request ring)
//	64    tail    uint64  the request ring's tail (producer)
//	128   head    uint64  the request ring's head (consumer)
//	192   busy    uint64  slot+1 of the peer's region the owner is copying into or out of, 0 if none
//	256   nudge   uint32  a nudge frame to the owner is pending
//	320   blocked uint32  the owner has records waiting for room in the ring
//	384   open    uint32  the owner's endpoint is connected and not failed:
//	                      the peer may touch the owner's memory
//	448   tail    uint64  the answer ring's tail (producer)
//	512   head    uint64  the answer ring's head (consumer)
//	4096  the request ring's cells, then the answer ring's
//
// The request ring carries the owner's requests in post order (messages,
// immediates, staged writes, read requests); the answer ring carries its
// answers to the peer's staged reads, so that an answer never waits behind
// a message that waits for a receive (as an RC responder answers reads
// while its own requests wait on receiver-not-ready).
const (
	ctlMagic = "goccl/c1"
	txMagic  = "goccl/t1"

	ctlPid    = 8
	ctlMaxCQs = 12
	ctlSlots  = 16

	slotSize   = 64
	slotState  = 0
	slotKey    = 8
	slotAddr   = 16
	slotLen    = 24
	slotSeg    = 32
	slotSegOff = 40
	slotAccess = 48
	slotLive   = 1

	txCellsN   = 8
	txTail     = 64
	txHead     = 128
	txBusy     = 192
	txNudge    = 256
	txBlocked  = 320
	txOpen     = 384
	txAnsTail  = 448
	txAnsHead  = 512
	txCells    = 4096
	bellStride = 64
)

func ctlBellsEnd(maxCQs int) int { return pageRound(64 * (1 + maxCQs)) }

func ctlSize(maxCQs, slots int) int { return ctlBellsEnd(maxCQs) + pageRound(slots*slotSize) }

func txSize(cells uint64) int { return txCells + int(cells+ansCells(cells))*cellSize }

// ansCells is the size of the answer ring that goes with a request ring
// of cells cells: a quarter of it.
func ansCells(cells uint64) uint64 { return cells / 4 }

func u32(b []byte, off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&b[off])) }
func u64(b []byte, off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&b[off])) }

func writeMagic(b []byte, magic string) { copy(b[:8], magic) }

func putHeader32(b []byte, off int, v uint32) { binary.LittleEndian.PutUint32(b[off:], v) }

// bell is an event count in shared memory that waiters of one completion
// queue sleep on (futex on seq) and that anyone who may have made the
// queue's completions ready rings: the owner's own goroutines, and peers
// after they publish records or consume the owner's.
//
// A waiter increments waiters, loads seq, checks its condition once more
// and sleeps only while seq is unchanged; a ringer first publishes, then
// loads waiters and, if someone waits, bumps seq and wakes. Both orders
// are sequentially consistent, so either the waiter sees the published
// state or the ringer sees the waiter: no wake-up is lost.
type bell struct {
	seq     *atomic.Uint32
	waiters *atomic.Uint32
}

func bellAt(part1 []byte, i int) bell {
	off := bellStride * (1 + i)
	return bell{seq: u32(part1, off), waiters: u32(part1, off+4)}
}

// ring wakes the queue's sleepers, if any. It costs one load when nobody
// sleeps.
func (b bell) ring() {
	if b.waiters.Load() != 0 {
		b.seq.Add(1)
		futexWakeAll(b.seq)
		stats.wakes.Add(1)
	}
}

// stats counts events of the process's shm transport, for tests,
// benchmarks and diagnostics (Stats).
var stats struct {
	wakes, sleeps, nudges atomic.Uint64
}

// Stats are counters of the process's shm transport since it started:
// futex wake-ups sent to sleeping waiters (here or in peers), sleeps of
// waiters, and nudges sent to peers that did not drive progress.
type Stats struct {
	Wakes, Sleeps, Nudges uint64
}

// ReadStats returns the process's counters.
func ReadStats() Stats {
	return Stats{Wakes: stats.wakes.Load(), Sleeps: stats.sleeps.Load(), Nudges: stats.nudges.Load()}
}

// sleeping reports whether a waiter of the queue is asleep (or about to
// be): that waiter will drive progress once rung.
func (b bell) sleeping() bool { return b.waiters.Load() != 0 }

// wait sleeps until rung, for at most d, unless ready reports true after
// the waiter is announced.
func (b bell) wait(d time.Duration, ready func() bool) {
	b.waiters.Add(1)
	s := b.seq.Load()
	if !ready() {
		futexSleep(b.seq, s, d)
	}
	b.waiters.Add(^uint32(0))
}

// slotView reads and writes one slot of a region table.
type slotView []byte

func tableSlot(table []byte, i int) slotView { return slotView(table[i*slotSize : (i+1)*slotSize]) }

func (s slotView) state() *atomic.Uint64 { return u64(s, slotState) }

// slotInfo is a copy of a live slot's fields, taken once.
type slotInfo struct {
	key, addr, len, seg, segOff uint64
	access                      uint32
}

func (s slotView) read() slotInfo {
	return slotInfo{
		key:    binary.LittleEndian.Uint64(s[slotKey:]),
		addr:   binary.LittleEndian.Uint64(s[slotAddr:]),
		len:    binary.LittleEndian.Uint64(s[slotLen:]),
		seg:    binary.LittleEndian.Uint64(s[slotSeg:]),
		segOff: binary.LittleEndian.Uint64(s[slotSegOff:]),
		access: binary.LittleEndian.Uint32(s[slotAccess:]),
	}
}

// publish fills the slot and then makes it live.
func (s slotView) publish(i slotInfo) {
	binary.LittleEndian.PutUint64(s[slotKey:], i.key)
	binary.LittleEndian.PutUint64(s[slotAddr:], i.addr)
	binary.LittleEndian.PutUint64(s[slotLen:], i.len)
	binary.LittleEndian.PutUint64(s[slotSeg:], i.seg)
	binary.LittleEndian.PutUint64(s[slotSegOff:], i.segOff)
	binary.LittleEndian.PutUint32(s[slotAccess:], i.access)
	s.state().Store(slotLive)
}
