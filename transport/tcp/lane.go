package tcp

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// lane is one TCP connection of an endpoint and the machinery that moves
// its bytes.
//
// The lane owns the socket's descriptor outright: after the handshake the
// connection leaves Go's netpoller (which would wake one of the runtime's
// threads for every segment that arrives, whoever reads it: a tenth of the
// CPU of a 64 MiB allreduce went there) and every read and write is a
// non-blocking system call made by whoever drives the lane.
//
// Whoever holds rxMu reads and parses the socket; whoever holds txMu writes
// it. Both are only ever try-locked and held for non-blocking work, by any
// of: a caller's Poll or Wait (cq.drive, cq.sleep), a post (which writes
// its frame at once when the connection is idle), the device's background
// loop (bgloop.go), and the queue's lazy timer. A goroutine that finds the
// lock taken sets the matching miss flag; the holder, after unlocking, sees
// the flag and makes another pass, so work signalled during a pass is never
// left behind.
type lane struct {
	e  *endpoint
	q  *cq
	fd int // the socket; closed by stop, after which nobody touches it

	rxMu   sync.Mutex
	rxMiss atomic.Bool
	rx     rxState

	txMu   sync.Mutex
	txMiss atomic.Bool
	tx     txState
	// txWant is set (under e.mu) when the lane has output to write:
	// queued frames, owed acknowledgements or a batch only partly written.
	txWant atomic.Bool
	// txNow is set with txWant when the output may not wait for the next
	// frame to the peer: a frame that is not lazy (endpoint.PostWriteLazy),
	// or a batch the socket had no room for. Without it, what txWant
	// announces (acknowledgements owed, lazy frames) is written by a
	// caller's poll only once polls stop moving bytes (cq.drive), and
	// otherwise with the next frame, before a caller sleeps (parker), or by
	// the background loop once the callers leave.
	txNow atomic.Bool

	// The background loop's service of this lane (bgloop.go).
	bgRead     atomic.Bool  // it watches the socket for reading
	bgWrite    atomic.Bool  // it watches the socket for room to write
	rdDeadline atomic.Int64 // unix ns: a drain after a failure ends then (0: none)
	wrDeadline atomic.Int64 // unix ns: the writes owed after a failure end then
	rdEnd      atomic.Bool  // nothing more is read from this socket

	closed    atomic.Bool   // fd is closed (stop); set with rxMu and txMu held
	shut      atomic.Bool   // shutdown(2) both ways was called
	txEnd     chan struct{} // closed when the lane writes no more (see endTx)
	txEndOnce sync.Once
	txDone    atomic.Bool // txEnd is closed
}

// takeSocket takes c's socket out of Go's netpoller: it duplicates the
// descriptor and closes c (which unregisters c's). The duplicate keeps the
// socket, its options and its non-blocking mode.
func takeSocket(c *net.TCPConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var derr error
	if err := raw.Control(func(f uintptr) { fd, derr = unix.Dup(int(f)) }); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, fmt.Errorf("dup: %w", derr)
	}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("set non-blocking: %w", err)
	}
	c.Close()
	return fd, nil
}

func newLane(e *endpoint, fd int) *lane {
	l := &lane{e: e, q: e.cq, fd: fd, txEnd: make(chan struct{})}
	l.rx.init()
	l.tx.init()
	l.bgRead.Store(true) // until a caller polls the lane
	return l
}

// start makes the lane visible to its queue's pollers and to the
// background loop.
func (l *lane) start() {
	l.q.addLane(l)
	l.e.dev.bg.add(l)
}

// stop takes the lane away from its queue's pollers and the background
// loop and closes the socket. The endpoint must have failed (Close).
func (l *lane) stop() {
	l.q.removeLane(l)
	l.e.dev.bg.remove(l)
	l.endTx()
	l.rxMu.Lock()
	l.txMu.Lock()
	l.rxCleanup()
	l.txCleanup()
	if !l.closed.Swap(true) {
		unix.Close(l.fd)
	}
	l.txMu.Unlock()
	l.rxMu.Unlock()
}

// shutdown ends the connection both ways without releasing the descriptor
// (stop does that): the peer sees the end of the stream, and pollers of the
// socket wake up.
func (l *lane) shutdown() {
	if !l.shut.Swap(true) {
		unix.Shutdown(l.fd, unix.SHUT_RDWR)
	}
}

// sysRead reads from the socket without blocking; it returns unix.EAGAIN
// when nothing is there, and (0, nil) at the end of the stream. The caller
// holds rxMu.
//
// sysRead and sysWritev make raw system calls, which do not tell the
// scheduler that the goroutine entered one: the socket is non-blocking, so
// the call returns at once (after copying at most what the socket holds or
// has room for). Through syscall.Syscall a spinning Wait kept the runtime's
// monitor thread waking every 20 µs to look for a processor to take back
// from "a goroutine in a system call", and each of its wake-ups took the
// core from the rank's own thread (measured: two threads of each rank
// alternating on one core every ~100 µs, the p90 of an 8-byte allreduce
// between two processes 30-50 µs for a p50 of 13 µs).
func (l *lane) sysRead(p []byte) (int, error) {
	if l.closed.Load() {
		return 0, net.ErrClosed
	}
	if len(p) == 0 {
		return 0, nil
	}
	for {
		r, _, en := unix.RawSyscall(unix.SYS_READ, uintptr(l.fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		if en == unix.EINTR {
			continue
		}
		raceRead()
		switch en {
		case 0:
			return int(r), nil
		case unix.EAGAIN:
			return 0, errAgain // boxed once: most reads of a spinning Wait end here
		}
		return 0, en
	}
}

// sysWritev writes l.tx.iov without blocking. The caller holds txMu.
func (l *lane) sysWritev() (int, error) {
	if l.closed.Load() {
		return 0, net.ErrClosed
	}
	raceWritten()
	iov := l.tx.iov
	for {
		r, _, en := unix.RawSyscall(unix.SYS_WRITEV, uintptr(l.fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
		if en == unix.EINTR {
			continue
		}
		if en != 0 {
			return 0, en
		}
		return int(r), nil
	}
}

// poll is a caller's non-blocking pass over the lane (cq.drive): write what
// is queued (lazy output only if due, see txNow), then read and parse what
// arrived. It reports whether bytes moved.
func (l *lane) poll(due bool) bool {
	if l.e.failed.Load() {
		return false
	}
	moved := false
	if l.txWant.Load() && (due || l.txNow.Load()) {
		if ok, m, _ := l.txTry(false); ok && m {
			moved = true
		}
	}
	if ok, m, _ := l.rxTry(false); ok && m {
		moved = true
	}
	return moved
}

// rxTry makes receive passes while it can take rxMu. locked reports whether
// it got the lock; moved whether bytes arrived; blocked whether the last
// pass ended on an empty socket.
func (l *lane) rxTry(bg bool) (locked, moved, blocked bool) {
	l.rxMiss.Store(true)
	if !l.rxMu.TryLock() {
		return false, false, false
	}
	kick := false
	for {
		l.rxMiss.Store(false)
		m, b := l.rxPass(bg)
		moved = moved || m
		blocked = b
		// What the pass owes the peer leaves now if the background
		// loop made it (nobody else may write soon), if it is a read
		// response, or if the sender waits for it (a payload longer than
		// maxInline, not copied at post); a caller's other
		// acknowledgements go with its next frame or its next poll.
		kick = kick || l.rx.respond || l.rx.urgent || (bg && l.rx.acked)
		l.rx.respond, l.rx.acked, l.rx.urgent = false, false, false
		l.rxMu.Unlock()
		if !l.rxMiss.Load() || !l.rxMu.TryLock() {
			break
		}
	}
	if kick {
		l.e.ctl().kick(bg)
	}
	return true, moved, blocked
}

// txTry makes transmit passes while it can take txMu; see rxTry. blocked
// reports that output is left because the socket is full.
func (l *lane) txTry(bg bool) (locked, moved, blocked bool) {
	l.txMiss.Store(true)
	if !l.txMu.TryLock() {
		return false, false, false
	}
	for {
		l.txMiss.Store(false)
		m, b := l.txPass(bg)
		moved = moved || m
		blocked = b
		l.txMu.Unlock()
		if !l.txMiss.Load() || !l.txMu.TryLock() {
			break
		}
	}
	if blocked {
		l.txNow.Store(true)
		l.blocked(bg)
	}
	return true, moved, blocked
}

// blocked arranges for output left in a full socket to be written. A
// caller (a post, a Poll or Wait) leaves it to its queue's next Poll or
// Wait, which comes soon in every loop that posts, and to the lazy timer
// if it does not come: waking the background loop here would cost a thread
// wake-up for every large post. The background loop itself (which serves
// nobody who polls) and a failed endpoint's owed writes use the
// background loop.
func (l *lane) blocked(bg bool) {
	if !bg && !l.e.failed.Load() {
		l.q.idle()
		return
	}
	l.armWriter()
}

// kick writes queued output now if the lane's writer is free (a post, or an
// acknowledgement owed). Posts call it with bg false: a full socket is then
// left to a Poll or Wait of the queue, or to the background loop.
func (l *lane) kick(bg bool) { l.txTry(bg) }

// post writes a frame just queued by a post. If the queue's callers are
// active (a Poll or Wait is running or returned within coalesceWindow),
// the frame waits for their next poll, so that the frames a caller posts
// between two polls leave together, in one system call; otherwise the
// posting goroutine writes it now. The queue's lazy timer writes what a
// caller leaves behind.
func (l *lane) post() {
	if l.q.active() {
		l.q.idle()
		return
	}
	l.txTry(false)
}

// armReader has the background loop watch the socket for reading.
func (l *lane) armReader() {
	if !l.rdEnd.Load() && !l.bgRead.Swap(true) {
		l.e.dev.bg.ring()
	}
}

// armWriter has the background loop watch the socket for room to write.
func (l *lane) armWriter() {
	if !l.txDone.Load() && !l.bgWrite.Swap(true) {
		l.e.dev.bg.ring()
	}
}

// handOff gives the lane back to the background loop (see cq).
func (l *lane) handOff() {
	l.armReader()
	if l.txWant.Load() {
		l.txTry(true)
	}
}

// endTx marks the end of the lane's output: after a failure, once what was
// owed is written and the write side shut (or the writer gave up).
func (l *lane) endTx() {
	l.txEndOnce.Do(func() {
		l.txDone.Store(true)
		l.bgWrite.Store(false)
		close(l.txEnd)
	})
}

// bgReadable is the background loop's turn on a socket it watches for
// reading that polled readable (or hung up).
func (l *lane) bgReadable() {
	e := l.e
	if e.failed.Load() {
		e.mu.Lock()
		linger := e.lingering && !e.closed
		e.mu.Unlock()
		if linger {
			l.lingerRead()
			return
		}
		l.rdEnd.Store(true)
		l.bgRead.Store(false)
		return
	}
	if l.q.standAside() && !e.wfail.Load() {
		l.bgRead.Store(false) // a Wait polls it: stand aside
		return
	}
	l.rxTry(true)
}

// lingerRead drains the connection after a refusal, so that the NAK reaches
// the peer before the connection is reset; the deadline fail set bounds it.
func (l *lane) lingerRead() {
	if !l.rxMu.TryLock() {
		return
	}
	defer l.rxMu.Unlock()
	l.rxCleanup()
	for {
		n, err := l.sysRead(l.rx.buf)
		switch {
		case isAgain(err):
			return
		case err != nil || n == 0:
			l.lingerOver()
			return
		}
	}
}

// lingerOver ends the drain that follows a refusal: the connection closes.
func (l *lane) lingerOver() {
	l.rdEnd.Store(true)
	l.bgRead.Store(false)
	l.rdDeadline.Store(0)
	l.shutdown()
}

// bgWritable is the background loop's turn on a socket it watches for room
// to write that polled writable (or failed).
func (l *lane) bgWritable() {
	if l.q.standAside() && !l.e.failed.Load() {
		l.bgWrite.Store(false) // a Wait writes
		return
	}
	l.bgWrite.Store(false) // txTry re-arms it if the socket is still full
	l.txTry(true)
}

// deadlines handles the lane's deadlines that passed by now (unix ns).
func (l *lane) deadlines(now int64) {
	e := l.e
	if d := l.rdDeadline.Load(); d != 0 && now >= d {
		l.rdDeadline.Store(0)
		if e.failed.Load() {
			l.lingerOver() // the peer did not finish its side in time
		} else {
			e.mu.Lock()
			werr := e.werr
			e.mu.Unlock()
			e.linkFailed("write", werr)
		}
	}
	if d := l.wrDeadline.Load(); d != 0 && now >= d {
		l.wrDeadline.Store(0)
		if e.failed.Load() {
			l.endTx() // the peer does not read what is owed: give up
			l.shutdown()
		}
	}
}

// nextDeadline is the lane's earliest pending deadline (unix ns), or 0.
func (l *lane) nextDeadline() int64 {
	r, w := l.rdDeadline.Load(), l.wrDeadline.Load()
	switch {
	case r == 0:
		return w
	case w == 0:
		return r
	}
	return min(r, w)
}

// errAgain is EAGAIN as an error, boxed once: a spinning Wait's pass is
// mostly a read that finds the socket empty.
var errAgain error = unix.EAGAIN

// isAgain reports a socket with nothing to read or no room to write. It
// looks at the error's type and value directly: err == unix.EAGAIN
// compared the two interfaces through the runtime (runtime.ifaceeq, with
// convT64 boxing the read's errno, were 3% of a spinning receiver's user
// time in OSU's broadcast loop).
func isAgain(err error) bool {
	en, ok := err.(unix.Errno)
	return ok && en == unix.EAGAIN
}

// deadline is a unix-nanosecond time d from now.
func deadline(d time.Duration) int64 { return time.Now().Add(d).UnixNano() }
