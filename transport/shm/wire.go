package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The control connection of an endpoint is a SOCK_SEQPACKET Unix socket:
// every frame is one packet of frameSize bytes, some carrying file
// descriptors (SCM_RIGHTS). Layout (little endian):
//
//	0  magic   [4]byte "gcsf"
//	4  version uint8
//	5  type    uint8
//	6  status  uint8   hello-ack: helloOK...; bye: the cause
//	7  kind    uint8   bye: the kind of the failed request (opSend...)
//	8  reason  uint8   bye: why an access was refused (reasonKey...)
//	9  hasSeq  uint8   bye: seq names the failed request
//	10 -       [2]byte
//	12 a32     uint32
//	16...63    per type: hello and hello-ack carry three 16-byte tokens
//	           (dst, src, dev); setup packs its numbers and the CMA probe;
//	           the others carry five uint64 (a..e).
//
// The meaning of the fields per type is documented on frame. decodeFrame
// checks magic, version, type and the ranges of enumerated fields, and
// never panics.
const (
	frameSize    = 64
	frameVersion = 1
)

var frameMagic = [4]byte{'g', 'c', 's', 'f'}

// Frame types.
const (
	frameHello    = 1 // dialer -> acceptor: tokens and pid
	frameHelloAck = 2 // acceptor -> dialer: status
	frameSetup    = 3 // both ways, with fds [control, transmit]
	frameSegment  = 4 // an Alloc segment, with its fd
	frameForget   = 5 // a segment is no longer exported
	frameNudge    = 6 // run progress on this connection
	frameBye      = 7 // the sender closed or failed; no more frames follow
	frameWant     = 8 // asks for an exported segment (answered by segment or forget)
	frameTypes    = 9
)

// Hello-ack statuses.
const (
	helloOK      = 1
	helloUnknown = 2 // no such endpoint
	helloRefused = 3 // not the expected peer, or already connected
)

// Bye causes.
const (
	byeClosed       = 1 // the endpoint or device was closed
	byeRemoteAccess = 2 // a remote access was refused
	byeLength       = 3 // a message was longer than its receive
	byeProtocol     = 4 // the peer broke the protocol
	byeCauses       = 5
)

// Refusal reasons of an access.
const (
	reasonKey    = 1 // unknown or revoked key
	reasonBounds = 2 // outside the region
	reasonAccess = 3 // the region does not grant the right
	reasonLength = 4 // the message is longer than the receive (aux: its length)
	reasons      = 5
)

// Request kinds, as named in bye frames.
const (
	opSend  = 1
	opWrite = 2
	opRead  = 3
	opKinds = 4
)

// frame is a decoded control frame. Which fields mean what depends on typ:
//
//	hello:     dst, src (endpoint tokens), dev (the dialer's device token), pid
//	helloAck:  status, dst, src
//	setup:     a32 = the endpoint's bell index, a = ring cells, b = table
//	           slots, c = max CQs (bells), d = the CMA probe address, dst =
//	           the CMA probe bytes, e = max payload per record
//	segment:   a = segment id, b = size
//	forget:    a = segment id
//	want:      a = segment id
//	bye:       status = cause, kind, reason, hasSeq, a = seq, b = key,
//	           c = offset, d = length, e = aux (region size, receive length)
type frame struct {
	typ, status, kind, reason uint8
	hasSeq                    bool
	a32                       uint32
	a, b, c, d, e             uint64
	dst, src, dev             [16]byte
}

func (f *frame) encode(b *[frameSize]byte) {
	*b = [frameSize]byte{}
	copy(b[0:4], frameMagic[:])
	b[4] = frameVersion
	b[5], b[6], b[7], b[8] = f.typ, f.status, f.kind, f.reason
	if f.hasSeq {
		b[9] = 1
	}
	binary.LittleEndian.PutUint32(b[12:], f.a32)
	switch f.typ {
	case frameHello, frameHelloAck:
		copy(b[16:32], f.dst[:])
		copy(b[32:48], f.src[:])
		copy(b[48:64], f.dev[:])
	case frameSetup:
		binary.LittleEndian.PutUint64(b[16:], f.a)
		binary.LittleEndian.PutUint32(b[24:], uint32(f.b))
		binary.LittleEndian.PutUint32(b[28:], uint32(f.c))
		binary.LittleEndian.PutUint64(b[32:], f.d)
		binary.LittleEndian.PutUint32(b[40:], uint32(f.e))
		copy(b[44:60], f.dst[:])
	default:
		binary.LittleEndian.PutUint64(b[16:], f.a)
		binary.LittleEndian.PutUint64(b[24:], f.b)
		binary.LittleEndian.PutUint64(b[32:], f.c)
		binary.LittleEndian.PutUint64(b[40:], f.d)
		binary.LittleEndian.PutUint64(b[48:], f.e)
	}
}

var errFrame = errors.New("malformed control frame")

// decodeFrame parses a control frame. It never panics; the fields are
// checked against their type's ranges, not against the receiver's state.
func decodeFrame(b []byte, f *frame) error {
	if len(b) != frameSize {
		return fmt.Errorf("%w: %d bytes (want %d)", errFrame, len(b), frameSize)
	}
	if [4]byte(b[0:4]) != frameMagic {
		return fmt.Errorf("%w: bad magic %q", errFrame, b[0:4])
	}
	if b[4] != frameVersion {
		return fmt.Errorf("%w: version %d (want %d)", errFrame, b[4], frameVersion)
	}
	*f = frame{typ: b[5], status: b[6], kind: b[7], reason: b[8], hasSeq: b[9] != 0,
		a32: binary.LittleEndian.Uint32(b[12:])}
	if b[9] > 1 {
		return fmt.Errorf("%w: flag byte %d", errFrame, b[9])
	}
	switch f.typ {
	case frameHello, frameHelloAck:
		copy(f.dst[:], b[16:32])
		copy(f.src[:], b[32:48])
		copy(f.dev[:], b[48:64])
		if f.typ == frameHelloAck && (f.status < helloOK || f.status > helloRefused) {
			return fmt.Errorf("%w: hello-ack status %d", errFrame, f.status)
		}
	case frameSetup:
		f.a = binary.LittleEndian.Uint64(b[16:])
		f.b = uint64(binary.LittleEndian.Uint32(b[24:]))
		f.c = uint64(binary.LittleEndian.Uint32(b[28:]))
		f.d = binary.LittleEndian.Uint64(b[32:])
		f.e = uint64(binary.LittleEndian.Uint32(b[40:]))
		copy(f.dst[:], b[44:60])
	case frameSegment, frameForget, frameNudge, frameBye, frameWant:
		f.a = binary.LittleEndian.Uint64(b[16:])
		f.b = binary.LittleEndian.Uint64(b[24:])
		f.c = binary.LittleEndian.Uint64(b[32:])
		f.d = binary.LittleEndian.Uint64(b[40:])
		f.e = binary.LittleEndian.Uint64(b[48:])
		if f.typ == frameBye {
			if f.status == 0 || f.status >= byeCauses {
				return fmt.Errorf("%w: bye cause %d", errFrame, f.status)
			}
			if f.kind >= opKinds || f.reason >= reasons {
				return fmt.Errorf("%w: bye kind %d reason %d", errFrame, f.kind, f.reason)
			}
		}
	default:
		return fmt.Errorf("%w: type %d", errFrame, f.typ)
	}
	return nil
}

// fdsOf is how many descriptors a frame of type typ carries.
func fdsOf(typ uint8) int {
	switch typ {
	case frameSetup:
		return 2
	case frameSegment:
		return 1
	}
	return 0
}

// writeFrame sends f with fds (which stay open; the kernel duplicates
// them into the peer).
func writeFrame(c *net.UnixConn, f *frame, fds ...int) error {
	var b [frameSize]byte
	f.encode(&b)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, oobn, err := c.WriteMsgUnix(b[:], oob, nil)
	if err != nil {
		return err
	}
	if n != frameSize || oobn != len(oob) {
		return fmt.Errorf("short write of a control frame (%d+%d bytes)", n, oobn)
	}
	return nil
}

// frameReader reads frames with their descriptors. It calls recvmsg
// itself, without asking for the sender's address, so that reading a
// frame allocates nothing (net.UnixConn.ReadMsgUnix allocates the address
// of every packet).
type frameReader struct {
	c    *net.UnixConn
	raw  syscall.RawConn
	buf  [frameSize + 1]byte
	oob  []byte
	iov  unix.Iovec
	msg  unix.Msghdr
	rfn  func(fd uintptr) bool // r.recv, bound once
	n    int
	oobn int
	flag int
	err  error
}

func newFrameReader(c *net.UnixConn) *frameReader {
	r := &frameReader{c: c, oob: make([]byte, unix.CmsgSpace(4*4))}
	r.raw, r.err = c.SyscallConn()
	r.iov.Base = &r.buf[0]
	r.iov.SetLen(len(r.buf))
	r.msg.Iov = &r.iov
	r.msg.SetIovlen(1)
	r.msg.Control = &r.oob[0]
	r.rfn = r.recv
	return r
}

// recv is one recvmsg; it reports false to wait for the socket to be
// readable (the netpoller).
func (r *frameReader) recv(fd uintptr) bool {
	r.msg.SetControllen(len(r.oob))
	r.msg.Flags = 0
	n, _, errno := unix.Syscall(unix.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&r.msg)), unix.MSG_CMSG_CLOEXEC)
	if errno == unix.EAGAIN {
		return false
	}
	if errno == unix.EINTR {
		return r.recv(fd)
	}
	r.n, r.oobn, r.flag, r.err = int(n), int(r.msg.Controllen), int(r.msg.Flags), nil
	if errno != 0 {
		r.err = errno
	}
	return true
}

// read returns the next frame and exactly the descriptors its type
// carries (the caller owns them). A frame with the wrong number of
// descriptors, truncated control data or a malformed body is an error;
// every descriptor received with it is closed.
func (r *frameReader) read(f *frame, deadline time.Time) ([]int, error) {
	if r.err != nil && r.raw == nil {
		return nil, r.err
	}
	r.c.SetReadDeadline(deadline)
	if err := r.raw.Read(r.rfn); err != nil {
		return nil, err
	}
	if r.err != nil {
		return nil, r.err
	}
	n, oobn, flags := r.n, r.oobn, r.flag
	var fds []int
	if oobn > 0 {
		msgs, perr := unix.ParseSocketControlMessage(r.oob[:oobn])
		if perr == nil {
			for i := range msgs {
				got, rerr := unix.ParseUnixRights(&msgs[i])
				if rerr == nil {
					fds = append(fds, got...)
				}
			}
		}
	}
	fail := func(err error) ([]int, error) {
		closeAll(fds)
		return nil, err
	}
	if n == 0 {
		return fail(errEOF)
	}
	if flags&(unix.MSG_CTRUNC|unix.MSG_TRUNC) != 0 {
		return fail(fmt.Errorf("%w: truncated (flags %#x)", errFrame, flags))
	}
	if err := decodeFrame(r.buf[:n], f); err != nil {
		return fail(err)
	}
	if len(fds) != fdsOf(f.typ) {
		return fail(fmt.Errorf("%w: frame type %d with %d descriptors", errFrame, f.typ, len(fds)))
	}
	return fds, nil
}

var errEOF = errors.New("connection closed by the peer")

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
