package shm

import (
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/transport"
)

// readLoop serves the control connection: the peer's segments, nudges and
// its bye. A hang-up (the peer closed the socket or its process died)
// fails the endpoint after placing what the peer published before.
func (e *endpoint) readLoop(fr *frameReader) {
	defer e.reader.Done()
	var f frame
	for {
		fds, err := fr.read(&f, time.Time{})
		if err != nil {
			e.peerGone.Store(true)
			if e.live.Load() && !e.failed.Load() {
				if !errors.Is(err, errEOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, errFrame) {
					err = fmt.Errorf("%v", err)
				}
				e.drain()
				e.fail(failure{cause: fmt.Errorf("shm: connection to %s: %v: %w", e.peerName, err, transport.ErrPeerClosed)})
			}
			return
		}
		switch f.typ {
		case frameSegment:
			e.mapSegment(f.a, f.b, fds[0])
			unix.Close(fds[0])
			e.progress() // requests may wait for it
		case frameForget:
			e.unmapSegment(f.a)
			e.progress() // a request that waited for it takes another path
		case frameWant:
			e.giveSegment(f.a)
		case frameNudge:
			e.myNudge.Store(0)
			e.progress()
		case frameBye:
			e.peerBye(&f)
		default:
			e.protocolError(fmt.Errorf("control frame of type %d after the handshake", f.typ))
		}
	}
}

// drain places what the peer published and completes what it consumed,
// before the endpoint fails because of the peer.
func (e *endpoint) drain() {
	e.rxMu.Lock()
	e.rxStep()
	e.rxMu.Unlock()
	e.complete()
}

// peerBye fails the endpoint with the cause the peer gives.
func (e *endpoint) peerBye(f *frame) {
	if e.failed.Load() {
		return
	}
	e.drain()
	var fl failure
	switch f.status {
	case byeClosed:
		fl.cause = fmt.Errorf("shm: %s closed the connection: %w", e.peerName, transport.ErrPeerClosed)
	case byeRemoteAccess:
		op := "write"
		if f.kind == opRead {
			op = "read"
		}
		err := refusal(op, e.peerName, f.b, f.c, f.d, f.reason, f.e)
		fl.cause = err
		if f.hasSeq && (f.kind == opWrite || f.kind == opRead) {
			fl.kind, fl.seq = f.kind, f.a // our request, refused by the peer
		} else {
			fl.remote = err // the peer's request, refused by itself
		}
	case byeLength:
		fl.cause = fmt.Errorf("shm: send to %s: message of %d bytes longer than the posted receive of %d bytes: %w", e.peerName, f.d, f.e, transport.ErrLength)
		if f.hasSeq {
			fl.kind, fl.seq = opSend, f.a
		}
	default:
		fl.cause = fmt.Errorf("shm: %s failed the connection: %w", e.peerName, transport.ErrLink)
	}
	e.fail(fl)
}

// Segments on demand. A peer maps a segment of this device's memory
// (memory from Alloc holding a region it may write or read) only when it
// first reaches a region in it: it sends a want (endpoint.want), and this
// side's reader answers with the segment and its descriptor, or with a
// forget if the segment is no longer exported (its regions were revoked).
// So a rank that connects and releases many peers (a large job's
// all-to-all, whose links live for one window) does not send every new
// staging segment to every connected peer, nor every peer every segment
// at connect: a segment goes to the peers that use it. Deregister tells
// those peers (sent) to unmap it once its last region is revoked.

// giveSegment answers the peer's want of segment id (on the reader).
func (e *endpoint) giveSegment(id uint64) {
	e.ctlMu.Lock()
	defer e.ctlMu.Unlock()
	if _, ok := e.sent[id]; ok {
		return // on its way already
	}
	// The descriptor is duplicated under regMu, while the export (and so
	// the segment's descriptor) lives. Deregister removes the export under
	// regMu too, then takes ctlMu to send its forget: either it finds the
	// segment in sent, or this finds no export.
	d := e.dev
	fd, size := -1, 0
	d.regMu.Lock()
	if x := d.exports[id]; x != nil {
		if nfd, err := unix.FcntlInt(uintptr(x.seg.fd), unix.F_DUPFD_CLOEXEC, 0); err == nil {
			fd, size = nfd, len(x.seg.mem)
		}
	}
	d.regMu.Unlock()
	e.conn.SetWriteDeadline(time.Now().Add(d.opts.HandshakeTimeout))
	if fd < 0 {
		writeFrame(e.conn, &frame{typ: frameForget, a: id})
		return
	}
	defer unix.Close(fd)
	if writeFrame(e.conn, &frame{typ: frameSegment, a: id, b: uint64(size)}, fd) == nil {
		if e.sent == nil {
			e.sent = make(map[uint64]struct{})
		}
		e.sent[id] = struct{}{}
	}
}

// forgetSegment tells the peer that segment id is no longer exported, if
// it was given the segment.
func (e *endpoint) forgetSegment(id uint64) {
	e.ctlMu.Lock()
	defer e.ctlMu.Unlock()
	if _, ok := e.sent[id]; !ok {
		return
	}
	delete(e.sent, id)
	e.conn.SetWriteDeadline(time.Now().Add(e.dev.opts.HandshakeTimeout))
	writeFrame(e.conn, &frame{typ: frameForget, a: id})
}

// want asks the peer for its segment id (under txMu). The answer comes to
// the reader, which maps the segment and runs progress.
func (e *endpoint) want(id uint64) {
	e.ctlMu.Lock()
	defer e.ctlMu.Unlock()
	e.conn.SetWriteDeadline(time.Now().Add(e.dev.opts.HandshakeTimeout))
	writeFrame(e.conn, &frame{typ: frameWant, a: id})
}

// maxSegment bounds the size of a segment a peer exports.
const maxSegment = 1 << 42

func (e *endpoint) mapSegment(id, size uint64, fd int) {
	if id == 0 || size == 0 || size > maxSegment {
		e.protocolError(fmt.Errorf("segment %d of %d bytes", id, size))
		return
	}
	m, err := mapPeer(fd, int64(size), 0, 0, unix.PROT_READ|unix.PROT_WRITE, false)
	if err != nil {
		e.protocolError(fmt.Errorf("segment %d: %v", id, err))
		return
	}
	e.segMu.Lock()
	if e.segs[id] == nil && e.live.Load() {
		e.segs[id], m = m, nil
	}
	e.segMu.Unlock()
	if m != nil {
		unix.Munmap(m)
	}
}

// unmapSegment drops a mapping. Copies into it run under txMu, so it waits
// for them.
func (e *endpoint) unmapSegment(id uint64) {
	e.txMu.Lock()
	e.segMu.Lock()
	m := e.segs[id]
	delete(e.segs, id)
	e.segMu.Unlock()
	if e.lastSegID == id {
		e.lastSegID, e.lastSeg = 0, nil
	}
	delete(e.asked, id)
	e.txMu.Unlock()
	if m != nil {
		unix.Munmap(m)
	}
}
