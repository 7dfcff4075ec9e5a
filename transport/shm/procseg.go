package shm

import (
	"fmt"
	"sort"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/transport"
)

// SegmentInfo names the Alloc'd segment that holds some memory, so that
// another process of the same user can map it (MapProcessSegment): the
// segment's file descriptor in this process, its process-unique id, its
// size, and the memory's offset in it.
type SegmentInfo struct {
	FD   int
	ID   uint64
	Size uint64
	Off  uint64
}

// LookupSegment reports the segment holding all of b, if b is memory from
// Alloc (ok false otherwise).
func LookupSegment(b []byte) (SegmentInfo, bool) {
	if len(b) == 0 {
		return SegmentInfo{}, false
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	segments.mu.RLock()
	defer segments.mu.RUnlock()
	i := sort.Search(len(segments.list), func(i int) bool { return segments.list[i].base() > p }) - 1
	if i < 0 {
		return SegmentInfo{}, false
	}
	s := segments.list[i]
	if p-s.base()+uintptr(len(b)) > uintptr(len(s.mem)) {
		return SegmentInfo{}, false
	}
	return SegmentInfo{FD: s.fd, ID: s.id, Size: uint64(len(s.mem)), Off: uint64(p - s.base())}, true
}

// MapProcessSegment maps, read-only, the whole segment whose descriptor
// in process pid is fd (SegmentInfo.FD there), taking a copy of the
// descriptor with pidfd_getfd (which needs the same right over pid as
// process_vm_readv). The mapping is the caller's: release it with
// unix.Munmap. A descriptor that is not a sealed memfd is refused (the
// error wraps transport.ErrInvalid).
func MapProcessSegment(pid, fd int) ([]byte, error) {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("shm: map segment of process %d: pidfd_open: %w", pid, err)
	}
	defer unix.Close(pidfd)
	mine, err := unix.PidfdGetfd(pidfd, fd, 0)
	if err != nil {
		return nil, fmt.Errorf("shm: map segment of process %d: pidfd_getfd: %w", pid, err)
	}
	defer unix.Close(mine)
	var st unix.Stat_t
	if err := unix.Fstat(mine, &st); err != nil {
		return nil, fmt.Errorf("shm: map segment of process %d: fstat: %w", pid, err)
	}
	if st.Size <= 0 || st.Size > maxSegment {
		return nil, fmt.Errorf("shm: map segment of process %d: %d bytes: %w", pid, st.Size, transport.ErrInvalid)
	}
	m, err := mapPeer(mine, st.Size, 0, 0, unix.PROT_READ, false)
	if err != nil {
		return nil, fmt.Errorf("shm: map segment of process %d: %v: %w", pid, err, transport.ErrInvalid)
	}
	return m, nil
}
