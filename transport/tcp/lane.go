package tcp

import (
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// lane is one TCP connection of an endpoint and the machinery that moves
// its bytes.
//
// Whoever holds rxMu reads and parses the socket; whoever holds txMu writes
// it. Both are only ever try-locked and held for non-blocking work, by any
// of: a caller's Poll or Wait (cq.drive), a post (which writes its frame at
// once when the connection is idle), the lane's background reader and
// writer, and the queue's lazy timer. A goroutine that finds the lock taken
// sets the matching miss flag; the holder, after unlocking, sees the flag
// and makes another pass, so work signalled during a pass is never left
// behind.
//
// The background reader waits in the runtime's netpoller for the socket to
// become readable and the background writer for it to become writable (the
// latter only while output is blocked). While a Wait on the lane's queue
// spins, they stand aside: the reader goes dormant at its first wake-up,
// and the spinner does their work. They are woken again when the spinner
// parks (cq.handOff) or callers stop coming (cq.lazy).
type lane struct {
	e    *endpoint
	q    *cq
	conn *net.TCPConn
	raw  syscall.RawConn
	fd   int // the socket's descriptor, for poll(2) only (see parker)

	rxMu   sync.Mutex
	rxMiss atomic.Bool
	rx     rxState

	txMu   sync.Mutex
	txMiss atomic.Bool
	tx     txState
	// txWant is set (under e.mu) when the lane has output to write:
	// queued frames, owed acknowledgements or a batch only partly written.
	txWant atomic.Bool

	rdDormant atomic.Bool   // the background reader stands aside
	rdArm     chan struct{} // wakes a dormant background reader
	wrArm     chan struct{} // wakes the background writer
	quit      chan struct{} // closed when the lane's goroutines must end
	quitOnce  sync.Once
	wg        sync.WaitGroup
	txEnd     chan struct{} // closed when the lane writes no more (see endTx)
	txEndOnce sync.Once
	txDone    atomic.Bool // txEnd is closed
	rdEnd     bool        // the background reader is done (its own state)

	// Closures handed to the RawConn, made once (a closure per call
	// would allocate).
	rdFn   func(uintptr)
	wvFn   func(uintptr)
	bgRdFn func(uintptr) bool
	bgWrFn func(uintptr) bool
}

func newLane(e *endpoint, c *net.TCPConn) (*lane, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var fd int
	if err := raw.Control(func(f uintptr) { fd = int(f) }); err != nil {
		return nil, err
	}
	l := &lane{e: e, q: e.cq, conn: c, raw: raw, fd: fd,
		rdArm: make(chan struct{}, 1), wrArm: make(chan struct{}, 1),
		quit: make(chan struct{}), txEnd: make(chan struct{})}
	l.rx.init()
	l.tx.init()
	l.rdFn = func(fd uintptr) {
		for {
			n, err := unix.Read(int(fd), l.rx.io)
			if err == unix.EINTR {
				continue
			}
			l.rx.ioN, l.rx.ioErr = n, err
			return
		}
	}
	l.wvFn = func(fd uintptr) {
		for {
			iov := l.tx.iov
			r, _, en := unix.Syscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
			if en == unix.EINTR {
				continue
			}
			if en != 0 {
				l.tx.ioN, l.tx.ioErr = 0, en
			} else {
				l.tx.ioN, l.tx.ioErr = int(r), nil
			}
			return
		}
	}
	l.bgRdFn = func(uintptr) bool { return l.bgRead() }
	l.bgWrFn = func(uintptr) bool { return l.bgWrite() }
	return l, nil
}

// start launches the background goroutines and makes the lane visible to
// its queue's pollers.
func (l *lane) start() {
	l.wg.Add(2)
	go l.readLoop()
	go l.writeLoop()
	l.q.addLane(l)
}

// stop ends the background goroutines (the connection must be closed, or
// about to be) and waits for them.
func (l *lane) stop() {
	l.quitOnce.Do(func() { close(l.quit) })
	l.q.removeLane(l)
	l.wg.Wait()
}

// sysRead reads from the socket without blocking; it returns unix.EAGAIN
// when nothing is there, and (0, nil) at the end of the stream.
func (l *lane) sysRead(p []byte) (int, error) {
	l.rx.io = p
	err := l.raw.Control(l.rdFn)
	l.rx.io = nil
	if err != nil {
		return 0, err
	}
	raceRead()
	return l.rx.ioN, l.rx.ioErr
}

// sysWritev writes l.tx.iov without blocking.
func (l *lane) sysWritev() (int, error) {
	raceWritten()
	if err := l.raw.Control(l.wvFn); err != nil {
		return 0, err
	}
	return l.tx.ioN, l.tx.ioErr
}

// poll is a caller's non-blocking pass over the lane (cq.drive): write what
// is queued, then read and parse what arrived. It reports whether bytes
// moved.
func (l *lane) poll() bool {
	if l.e.failed.Load() {
		return false
	}
	moved := false
	if l.txWant.Load() {
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
		// reader made it (nobody else may write soon) or if it is a read
		// response; a caller's acknowledgements go with its next frame or
		// its next poll.
		kick = kick || l.rx.respond || (bg && l.rx.acked)
		l.rx.respond, l.rx.acked = false, false
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
		l.blocked(bg)
	}
	return true, moved, blocked
}

// blocked arranges for output left in a full socket to be written: by a
// spinning Wait of the queue if there is one, else by the background
// writer.
func (l *lane) blocked(bg bool) {
	if !bg && l.q.standAside() && !l.e.failed.Load() {
		return
	}
	l.armWriter()
}

// kick writes queued output now if the lane's writer is free (a post, or an
// acknowledgement owed). Posts call it with bg false: a full socket is then
// left to a spinning Wait or to the background writer.
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

func (l *lane) armWriter() {
	select {
	case l.wrArm <- struct{}{}:
	default:
	}
}

func (l *lane) armReader() {
	if l.rdDormant.CompareAndSwap(true, false) {
		select {
		case l.rdArm <- struct{}{}:
		default:
		}
	}
}

// handOff gives the lane back to its background goroutines (see cq).
func (l *lane) handOff() {
	l.armReader()
	if l.txWant.Load() {
		l.txTry(true)
	}
}

// readLoop is the background reader: it waits for the socket to become
// readable and reads what nobody else reads.
func (l *lane) readLoop() {
	defer l.wg.Done()
	defer func() {
		l.rxMu.Lock()
		l.rxCleanup()
		l.rxMu.Unlock()
	}()
	e := l.e
	for {
		err := l.raw.Read(l.bgRdFn)
		select {
		case <-l.quit:
			return
		default:
		}
		if err != nil {
			if e.failed.Load() {
				// The linger's deadline passed, or the connection closed.
				e.lingerDone()
				return
			}
			e.readFailed(err)
			continue
		}
		if l.rdEnd {
			return
		}
		if l.rdDormant.Load() {
			select {
			case <-l.rdArm:
			case <-l.quit:
				return
			}
		}
	}
}

// bgRead is the background reader's step, called by RawConn.Read with the
// socket's read side held: true leaves the wait, false waits for the socket
// to become readable.
func (l *lane) bgRead() bool {
	select {
	case <-l.quit:
		return true
	default:
	}
	e := l.e
	if e.failed.Load() {
		e.mu.Lock()
		linger := e.lingering && !e.closed
		e.mu.Unlock()
		if linger {
			return l.lingerRead()
		}
		l.rdEnd = true
		return true
	}
	if l.q.standAside() && !e.wfail.Load() {
		l.rdDormant.Store(true)
		return true
	}
	locked, _, blocked := l.rxTry(true)
	if !locked {
		return false // the holder makes another pass (rxMiss)
	}
	if e.failed.Load() {
		return true
	}
	return !blocked
}

// lingerRead drains the connection after a refusal, so that the NAK reaches
// the peer before the connection is reset; the read deadline set by fail
// bounds it.
func (l *lane) lingerRead() bool {
	if !l.rxMu.TryLock() {
		return false
	}
	defer l.rxMu.Unlock()
	l.rxCleanup()
	for {
		n, err := l.sysRead(l.rx.buf)
		switch {
		case isAgain(err):
			return false
		case err != nil || n == 0:
			// End of stream or error: the linger is over.
			l.e.lingerDone()
			l.rdEnd = true
			return true
		}
	}
}

// writeLoop is the background writer: armed when output is blocked and no
// caller drives the lane, it waits for the socket to become writable and
// writes. After the endpoint failed it writes the acknowledgements and the
// refusal still owed, then closes its half of the connection (see build).
func (l *lane) writeLoop() {
	defer l.wg.Done()
	defer l.endTx()
	defer func() {
		l.txMu.Lock()
		l.txCleanup()
		l.txMu.Unlock()
	}()
	e := l.e
	for {
		select {
		case <-l.wrArm:
		case <-l.quit:
			return
		case <-l.txEnd:
			return
		}
		err := l.raw.Write(l.bgWrFn)
		if err != nil {
			if !e.failed.Load() {
				e.writeFailed(err)
			}
			return
		}
		if e.failed.Load() {
			e.mu.Lock()
			final := e.lingering
			e.mu.Unlock()
			if !final {
				return
			}
		}
	}
}

// endTx marks the end of the lane's output: after a failure, once what was
// owed is written and the write side shut (or the writer gave up).
func (l *lane) endTx() {
	l.txEndOnce.Do(func() {
		l.txDone.Store(true)
		close(l.txEnd)
	})
}

// bgWrite is the background writer's step, called by RawConn.Write: true
// leaves the wait, false waits for the socket to become writable.
func (l *lane) bgWrite() bool {
	select {
	case <-l.quit:
		return true
	case <-l.txEnd:
		return true
	default:
	}
	if l.q.standAside() && !l.e.failed.Load() {
		return true // a spinning Wait writes
	}
	locked, _, blocked := l.txTry(true)
	if !locked {
		return true // the holder arms us again if it blocks
	}
	return !blocked
}

// isAgain reports a socket with nothing to read or no room to write.
func isAgain(err error) bool { return err == unix.EAGAIN }

// isClosedConn reports the error of an access to a closed connection.
func isClosedConn(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrClosed)
}
