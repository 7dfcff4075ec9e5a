package shm

import (
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/transport"
)

// segment is one shared mapping made by Alloc: a sealed memfd (it can
// neither shrink nor grow, so a peer that maps it never faults past its
// end) mapped MAP_SHARED into this process. Devices export a segment to
// their peers (its fd over the Unix socket) while a region registered in
// it is alive; the peers map it and copy into or out of it directly.
type segment struct {
	id   uint64 // process-unique, never reused
	fd   int
	mem  []byte // the whole mapping, page-rounded
	regs atomic.Int64
}

// segments is the process's table of Alloc'd segments, sorted by address;
// retired holds, by size, the address ranges of freed segments (mapped to
// anonymous zeros by Free), which Alloc maps again.
var segments struct {
	mu      sync.RWMutex
	list    []*segment
	next    uint64
	retired map[int][]unsafe.Pointer
}

// Alloc returns n bytes of zeroed, page-aligned memory in a shared mapping:
// an anonymous memory file (memfd, nothing in /dev/shm or any file system)
// mapped MAP_SHARED. A region registered with an shm Device in this memory
// is mapped by the device's peers, so their writes and reads into it are
// one copy with no work on this side. The memory never moves and may be
// registered with any backend. Pages are populated on first touch.
// Release it with Free; Alloc(0) returns an empty slice.
func Alloc(n int) ([]byte, error) {
	if n < 0 {
		return nil, fmt.Errorf("shm: alloc %d bytes: %w", n, transport.ErrInvalid)
	}
	if n == 0 {
		return []byte{}, nil
	}
	size := pageRound(n)
	fd, err := newMemfd("goccl-shm", size)
	if err != nil {
		return nil, fmt.Errorf("shm: alloc %d bytes: %w", n, err)
	}
	segments.mu.Lock()
	var at unsafe.Pointer
	if r := segments.retired[size]; len(r) > 0 {
		at, segments.retired[size] = r[len(r)-1], r[:len(r)-1]
	}
	segments.mu.Unlock()
	var mem []byte
	if at != nil {
		// Over a freed segment's range (its placeholder goes).
		if _, err = unix.MmapPtr(fd, 0, at, uintptr(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED); err == nil {
			mem = unsafe.Slice((*byte)(at), size)
		} else {
			retireLater(at, size) // still the placeholder: keep it for later
		}
	}
	if mem == nil {
		if mem, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("shm: alloc %d bytes: mmap: %w", n, err)
		}
	}
	s := &segment{fd: fd, mem: mem}
	segments.mu.Lock()
	segments.next++
	s.id = segments.next
	i := sort.Search(len(segments.list), func(i int) bool { return segments.list[i].base() > s.base() })
	segments.list = append(segments.list, nil)
	copy(segments.list[i+1:], segments.list[i:])
	segments.list[i] = s
	segments.mu.Unlock()
	return mem[:n:n], nil
}

// Free releases memory returned by Alloc. The slice must be the one Alloc
// returned (not a subslice) and must not be used afterwards. Memory that
// is still registered with a device is not freed: Free returns an error
// wrapping transport.ErrInvalid (deregister it first). The pages go, but
// the addresses stay mapped, to anonymous zeros, as transport.Free keeps
// its memory: a stale slice never faults (it did: comm.Free of an Alloc'd
// buffer over shared memory, then a write through the old slice, crashed
// the program with SIGSEGV, where the README promises it does not), and a
// later Alloc of the same size maps its segment there again.
func Free(b []byte) error {
	if cap(b) == 0 {
		return nil
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	segments.mu.Lock()
	i := sort.Search(len(segments.list), func(i int) bool { return segments.list[i].base() >= p })
	if i == len(segments.list) || segments.list[i].base() != p {
		segments.mu.Unlock()
		return fmt.Errorf("shm: free %#x: not memory from shm.Alloc: %w", p, transport.ErrInvalid)
	}
	s := segments.list[i]
	if n := s.regs.Load(); n > 0 {
		segments.mu.Unlock()
		return fmt.Errorf("shm: free %d bytes at %#x: %d regions still registered in it: %w", len(s.mem), p, n, transport.ErrInvalid)
	}
	segments.list = append(segments.list[:i], segments.list[i+1:]...)
	segments.mu.Unlock()
	var err error
	if retire(s.mem) {
		retireLater(unsafe.Pointer(unsafe.SliceData(s.mem)), len(s.mem))
	} else {
		err = unix.Munmap(s.mem)
	}
	unix.Close(s.fd)
	if err != nil {
		return fmt.Errorf("shm: free %d bytes: munmap: %w", len(s.mem), err)
	}
	return nil
}

// retireLater keeps the retired range at (size bytes) for a later Alloc.
func retireLater(at unsafe.Pointer, size int) {
	segments.mu.Lock()
	defer segments.mu.Unlock()
	if segments.retired == nil {
		segments.retired = map[int][]unsafe.Pointer{}
	}
	segments.retired[size] = append(segments.retired[size], at)
}

func (s *segment) base() uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(s.mem))) }

// segmentOf returns the Alloc'd segment holding all of b and b's offset in
// it, and takes a registration reference on it (release with
// s.regs.Add(-1)). ok is false for memory Alloc did not make.
func segmentOf(b []byte) (s *segment, off uint64, ok bool) {
	if len(b) == 0 {
		return nil, 0, false
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	segments.mu.RLock()
	defer segments.mu.RUnlock()
	i := sort.Search(len(segments.list), func(i int) bool { return segments.list[i].base() > p }) - 1
	if i < 0 {
		return nil, 0, false
	}
	s = segments.list[i]
	if p-s.base()+uintptr(len(b)) > uintptr(len(s.mem)) {
		return nil, 0, false
	}
	s.regs.Add(1)
	return s, uint64(p - s.base()), true
}

var pageSize = os.Getpagesize()

func pageRound(n int) int { return (n + pageSize - 1) &^ (pageSize - 1) }

// newMemfd creates a close-on-exec memfd of size bytes, sealed against
// shrinking, growing and further sealing.
func newMemfd(name string, size int) (int, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("memfd of %d bytes: ftruncate: %w", size, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("memfd: seal: %w", err)
	}
	return fd, nil
}

// mapPeer maps a memfd received from a peer after checking that it is one:
// sealed against shrinking (so the mapping never faults past the end of
// the file) and of exactly size bytes. prot is the protection of the
// mapping; off and n select the part of the file to map (n == 0: all of
// it from off).
func mapPeer(fd int, size int64, off int64, n int, prot int, populate bool) ([]byte, error) {
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, fmt.Errorf("not a memfd: %w", err)
	}
	if seals&(unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL) != unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL {
		return nil, fmt.Errorf("memfd not sealed against shrinking (seals %#x)", seals)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("fstat: %w", err)
	}
	if st.Size != size {
		return nil, fmt.Errorf("memfd of %d bytes, want %d", st.Size, size)
	}
	if n == 0 {
		n = int(size - off)
	}
	if off < 0 || n <= 0 || off+int64(n) > size || off%int64(pageSize) != 0 {
		return nil, fmt.Errorf("bad mapping range %d+%d of %d bytes", off, n, size)
	}
	flags := unix.MAP_SHARED
	if populate {
		flags |= unix.MAP_POPULATE
	}
	mem, err := unix.Mmap(fd, off, n, prot, flags)
	if err != nil {
		return nil, fmt.Errorf("mmap %d bytes: %w", n, err)
	}
	return mem, nil
}
