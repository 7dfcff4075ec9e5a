package shm

import (
	"errors"
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/transport"
)

// How a request reaches the peer's memory.
const (
	pathDirect  = iota + 1 // copy through our mapping of the peer's segment (or, in-process, its buffer)
	pathCMA                // process_vm_writev / process_vm_readv
	pathStaged             // through the ring; the peer checks and copies
	pathRefused            // the peer's table refuses the access (reason set)
	pathWait               // the peer closed or is going away: wait for its bye
)

// target is where a direct or CMA copy goes.
type target struct {
	mem  []byte // pathDirect: the bytes of the access
	addr uint64 // pathCMA: the address in the peer
	size uint64 // the region's length (for refusals)
}

// remote decides how to reach [roff, roff+n) of the peer's region key with
// right need. A direct copy (through our mapping of the peer's segment, or
// into its buffer when it lives in this process) or a CMA copy is checked
// here against the peer's table: key, bounds, access; the staged path is
// checked by the peer. On pathDirect and pathCMA the peer's region is held
// (our busy word names its slot) until releaseRemote; the caller copies in
// between. Called under txMu.
//
// The busy word and the peer's revocation form a handshake (a Dekker
// pair, sequentially consistent atomics on both sides): we store busy,
// then load the peer's open flag and the slot's state; the peer's
// Deregister stores the state (not live), then waits while busy names the
// slot; its Close clears open, then waits for busy 0. So either we see the
// revocation and refuse, or the peer waits for our copy to end. Neither
// side can miss the other.
func (e *endpoint) remote(key, roff uint64, n int, need transport.Access) (t target, path int, reason uint8) {
	checks := e.cma || e.self != nil // else only a mapped segment lets us copy
	slot := key & (maxSlots - 1)
	if slot >= uint64(len(e.peerTab)/slotSize) {
		if checks {
			return t, pathRefused, reasonKey
		}
		return t, pathStaged, 0
	}
	e.myBusy.Store(slot + 1)
	if e.peerOpen.Load() == 0 {
		e.myBusy.Store(0)
		return t, pathWait, 0
	}
	sv := tableSlot(e.peerTab, int(slot))
	var info slotInfo
	live := sv.state().Load() == slotLive
	if live {
		info = sv.read()
		live = info.key == key
	}
	if !live {
		e.myBusy.Store(0)
		if checks {
			return t, pathRefused, reasonKey
		}
		return t, pathStaged, 0 // the peer refuses it
	}
	var mem []byte
	awaited := false // the segment is exported but not mapped here yet
	if e.self != nil {
		if r := e.self.slots[slot].Load(); r != nil && r.key == key && uint64(len(r.buf)) == info.len {
			mem = r.buf
		}
	} else if info.seg != 0 {
		m := e.lastSeg
		if e.lastSegID != info.seg {
			e.segMu.Lock()
			m = e.segs[info.seg]
			e.segMu.Unlock()
			if m != nil {
				e.lastSegID, e.lastSeg = info.seg, m
			}
		}
		if m != nil && inBounds(info.segOff, info.len, uint64(len(m))) {
			mem = m[info.segOff : info.segOff+info.len]
		}
		awaited = m == nil
	}
	if mem == nil && !awaited && !e.cma {
		e.myBusy.Store(0)
		return t, pathStaged, 0 // the peer checks and copies
	}
	t.size = info.len
	switch {
	case transport.Access(info.access)&need == 0:
		reason = reasonAccess
	case !inBounds(roff, uint64(n), info.len):
		reason = reasonBounds
	}
	if reason != 0 {
		e.myBusy.Store(0)
		return t, pathRefused, reason
	}
	if awaited {
		// Not mapped here yet: ask the peer for it (see giveSegment).
		// Cross-memory attach reaches the memory meanwhile; without it
		// the request waits for the answer (our reader runs progress
		// once it mapped the segment, or heard it is gone).
		e.askSegment(info.seg)
		if !e.cma && e.awaitSegment(info.seg) {
			e.myBusy.Store(0)
			return t, pathWait, 0
		}
	}
	if mem == nil && !e.cma {
		e.myBusy.Store(0)
		return t, pathStaged, 0 // the segment never came: the peer copies
	}
	if mem != nil {
		t.mem = mem[roff : roff+uint64(n)]
		return t, pathDirect, 0
	}
	t.addr = info.addr + roff
	return t, pathCMA, 0
}

// askSegment sends a want for segment id, once (under txMu).
func (e *endpoint) askSegment(id uint64) {
	if _, ok := e.asked[id]; ok {
		return
	}
	if e.asked == nil {
		e.asked = make(map[uint64]struct{})
	}
	e.asked[id] = struct{}{}
	e.want(id)
}

// segmentWait bounds how long a request waits for the peer's segment to be
// mapped before it takes another path.
const segmentWait = time.Second

// awaitSegment reports whether a request should wait for segment id.
// Under txMu.
func (e *endpoint) awaitSegment(id uint64) bool {
	now := time.Since(epoch)
	if e.segWaitID != id {
		e.segWaitID, e.segWaitSince = id, now
		return true
	}
	if now-e.segWaitSince < segmentWait {
		return true
	}
	if now-e.segWaitSince < segmentWait+time.Millisecond {
		e.dev.logf("%s: segment %d of the peer not mapped after %v; copying another way", e.peerName, id, segmentWait)
	}
	return false
}

func (e *endpoint) releaseRemote() {
	e.raceRelease()
	e.myBusy.Store(0)
}

// cmaWrite copies src to addr in the peer with process_vm_writev. Under
// txMu (the vectors are the endpoint's).
func (e *endpoint) cmaWrite(addr uint64, src []byte) error {
	for len(src) > 0 {
		e.liov[0] = unix.Iovec{Base: unsafe.SliceData(src)}
		e.liov[0].SetLen(len(src))
		e.riov[0] = unix.RemoteIovec{Base: uintptr(addr), Len: len(src)}
		n, err := unix.ProcessVMWritev(int(e.peer.pid), e.liov[:], e.riov[:], 0)
		if err != nil {
			return err
		}
		if n <= 0 {
			return unix.EFAULT
		}
		src, addr = src[n:], addr+uint64(n)
	}
	return nil
}

// cmaRead copies from addr in the peer into dst with process_vm_readv.
func (e *endpoint) cmaRead(addr uint64, dst []byte) error {
	return readProcess(int(e.peer.pid), addr, dst, &e.liov, &e.riov)
}

// CrossReader copies from another process's memory with process_vm_readv
// (cross-memory attach), keeping its I/O vectors so that a read allocates
// nothing. One goroutine at a time.
type CrossReader struct {
	liov [1]unix.Iovec
	riov [1]unix.RemoteIovec
}

// Read copies len(dst) bytes at addr in process pid into dst.
func (c *CrossReader) Read(pid int, addr uint64, dst []byte) error {
	return readProcess(pid, addr, dst, &c.liov, &c.riov)
}

// readProcess copies len(dst) bytes at addr in process pid into dst, with
// the vectors given.
func readProcess(pid int, addr uint64, dst []byte, liov *[1]unix.Iovec, riov *[1]unix.RemoteIovec) error {
	for len(dst) > 0 {
		liov[0] = unix.Iovec{Base: unsafe.SliceData(dst)}
		liov[0].SetLen(len(dst))
		riov[0] = unix.RemoteIovec{Base: uintptr(addr), Len: len(dst)}
		n, err := unix.ProcessVMReadv(pid, liov[:], riov[:], 0)
		if err != nil {
			return err
		}
		if n <= 0 {
			return unix.EFAULT
		}
		dst, addr = dst[n:], addr+uint64(n)
	}
	return nil
}

// probeCMA reports whether process_vm_readv of the peer works: it reads
// the 16 bytes at addr in process pid and compares them with want.
func probeCMA(pid int, addr uint64, want [16]byte) bool {
	var got [16]byte
	liov := []unix.Iovec{{Base: &got[0]}}
	liov[0].SetLen(len(got))
	riov := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(got)}}
	n, err := unix.ProcessVMReadv(pid, liov, riov, 0)
	return err == nil && n == len(got) && got == want
}

// cmaGone reports whether a CMA error means the peer process is gone
// (its bye or hang-up follows), rather than a bad address.
func cmaGone(err error) bool { return errors.Is(err, unix.ESRCH) }

// cmaRefused reports whether a CMA error means the kernel does not let this
// process use CMA on the peer (any more): then the ring takes over.
func cmaRefused(err error) bool {
	return errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.ENOSYS)
}

// refusal builds the error of a refused access, as both sides report it.
func refusal(op string, peer string, key, off, n uint64, reason uint8, size uint64) error {
	return fmt.Errorf("shm: remote %s with %s: key %#x offset %d len %d: %s: %w", op, peer, key, off, n, reasonText(reason, op, size), transport.ErrRemoteAccess)
}

func reasonText(reason uint8, op string, size uint64) string {
	switch reason {
	case reasonKey:
		return "unknown or revoked key"
	case reasonBounds:
		return fmt.Sprintf("out of bounds of region (len %d)", size)
	case reasonAccess:
		if op == "read" {
			return "region does not grant remote-read"
		}
		return "region does not grant remote-write"
	case reasonLength:
		return fmt.Sprintf("longer than the posted receive of %d bytes", size)
	}
	return fmt.Sprintf("refused (reason %d)", reason)
}
