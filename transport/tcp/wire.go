package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Frame header layout (big endian, headerSize bytes):
//
//	0  magic   uint16  'g' 'c'
//	2  version uint8   wireVersion
//	3  type    uint8   msgSend ... msgNak
//	4  status  uint8   statusOK or a refusal cause (NAK, READ_RESP)
//	5  flags   uint8   flagImm
//	6  kind    uint8   for ACK and NAK: the kind of request concerned
//	7  -       uint8   zero
//	8  id      uint64  sequence number of the initiator's request
//	16 key     uint64  remote key (WRITE, READ_REQ, NAK)
//	24 offset  uint64  offset in the remote region (WRITE, READ_REQ, NAK)
//	32 length  uint64  payload length; for ACK the number of requests
//	40 aux     uint64  NAK: the target region's length or the posted receive's
//	48 imm     uint32  immediate data (WRITE with flagImm)
//	52 -       uint32  zero
//
// SEND, WRITE and READ_RESP (status OK) are followed by length payload bytes.
const (
	headerSize  = 56
	wireMagic   = 0x6763 // "gc"
	wireVersion = 1
)

// Message types.
const (
	msgSend     uint8 = 1 // message for the peer's next receive
	msgWrite    uint8 = 2 // write into a remote region (flagImm: consumes a receive)
	msgReadReq  uint8 = 3 // request to read a remote region
	msgReadResp uint8 = 4 // the data of a read, or its refusal
	msgAck      uint8 = 5 // length requests of kind were placed
	msgNak      uint8 = 6 // the request id of kind was refused; the endpoint fails
	msgMax            = msgNak
)

// Request kinds named by ACK and NAK.
const (
	kindSend  uint8 = 1
	kindWrite uint8 = 2
	kindRead  uint8 = 3
)

const flagImm uint8 = 1

// Refusal causes carried in status.
const (
	statusOK uint8 = iota
	statusBadKey
	statusBounds
	statusAccess
	statusLength
	statusMax = statusLength
)

var errWire = errors.New("malformed frame")

type header struct {
	typ    uint8
	status uint8
	flags  uint8
	kind   uint8
	id     uint64
	key    uint64
	offset uint64
	length uint64
	aux    uint64
	imm    uint32
}

// encode writes h into b, which must hold headerSize bytes.
func (h *header) encode(b []byte) {
	_ = b[headerSize-1]
	binary.BigEndian.PutUint16(b[0:], wireMagic)
	b[2] = wireVersion
	b[3] = h.typ
	b[4] = h.status
	b[5] = h.flags
	b[6] = h.kind
	b[7] = 0
	binary.BigEndian.PutUint64(b[8:], h.id)
	binary.BigEndian.PutUint64(b[16:], h.key)
	binary.BigEndian.PutUint64(b[24:], h.offset)
	binary.BigEndian.PutUint64(b[32:], h.length)
	binary.BigEndian.PutUint64(b[40:], h.aux)
	binary.BigEndian.PutUint32(b[48:], h.imm)
	binary.BigEndian.PutUint32(b[52:], 0)
}

// decodeHeader parses and validates one header. It never panics; any
// malformed input is an error wrapping errWire. maxPayload bounds the
// payload length a frame may announce.
func decodeHeader(b []byte, h *header, maxPayload uint64) error {
	if len(b) < headerSize {
		return fmt.Errorf("short header (%d bytes): %w", len(b), errWire)
	}
	if m := binary.BigEndian.Uint16(b[0:]); m != wireMagic {
		return fmt.Errorf("bad magic %#04x: %w", m, errWire)
	}
	if b[2] != wireVersion {
		return fmt.Errorf("unsupported wire version %d (want %d): %w", b[2], wireVersion, errWire)
	}
	*h = header{
		typ:    b[3],
		status: b[4],
		flags:  b[5],
		kind:   b[6],
		id:     binary.BigEndian.Uint64(b[8:]),
		key:    binary.BigEndian.Uint64(b[16:]),
		offset: binary.BigEndian.Uint64(b[24:]),
		length: binary.BigEndian.Uint64(b[32:]),
		aux:    binary.BigEndian.Uint64(b[40:]),
		imm:    binary.BigEndian.Uint32(b[48:]),
	}
	if b[7] != 0 || binary.BigEndian.Uint32(b[52:]) != 0 {
		return fmt.Errorf("nonzero reserved bytes: %w", errWire)
	}
	if h.typ == 0 || h.typ > msgMax {
		return fmt.Errorf("unknown message type %d: %w", h.typ, errWire)
	}
	if h.status > statusMax {
		return fmt.Errorf("unknown status %d: %w", h.status, errWire)
	}
	if h.flags&^flagImm != 0 || (h.flags != 0 && h.typ != msgWrite) {
		return fmt.Errorf("bad flags %#x for type %d: %w", h.flags, h.typ, errWire)
	}
	switch h.typ {
	case msgAck:
		if h.kind != kindSend && h.kind != kindWrite {
			return fmt.Errorf("ack of unknown kind %d: %w", h.kind, errWire)
		}
		if h.length == 0 || h.length > 1<<32 {
			return fmt.Errorf("ack count %d: %w", h.length, errWire)
		}
	case msgNak:
		if h.kind < kindSend || h.kind > kindRead {
			return fmt.Errorf("nak of unknown kind %d: %w", h.kind, errWire)
		}
		if h.status == statusOK {
			return fmt.Errorf("nak without cause: %w", errWire)
		}
	case msgReadResp:
		if h.status != statusOK {
			return fmt.Errorf("read response with status %d: %w", h.status, errWire)
		}
		fallthrough
	default:
		if h.kind != 0 {
			return fmt.Errorf("kind %d on type %d: %w", h.kind, h.typ, errWire)
		}
		if h.typ != msgReadResp && h.status != statusOK {
			return fmt.Errorf("status %d on type %d: %w", h.status, h.typ, errWire)
		}
	}
	if h.typ == msgSend || h.typ == msgWrite || h.typ == msgReadResp || h.typ == msgReadReq {
		if h.length > maxPayload {
			return fmt.Errorf("length %d exceeds limit %d: %w", h.length, maxPayload, errWire)
		}
	}
	return nil
}

// Hello (dialer -> acceptor) and its answer (acceptor -> dialer), helloSize
// bytes each, big endian:
//
//	0  magic    [4]byte "gcth"
//	4  version  uint8   helloVersion
//	5  type     uint8   helloReq or helloAck
//	6  status   uint8   helloAck: helloOK or a refusal
//	7  -        uint8   zero
//	8  dst      [16]byte token of the acceptor's endpoint
//	24 src      [16]byte token of the dialer's endpoint
const (
	helloSize    = 40
	helloVersion = 1
	helloReq     = 1
	helloAck     = 2
)

var helloMagic = [4]byte{'g', 'c', 't', 'h'}

// Hello answer statuses.
const (
	helloOK uint8 = iota
	helloUnknown
	helloBusy
	helloVersionMismatch
	helloStatusMax = helloVersionMismatch
)

type hello struct {
	typ    uint8
	status uint8
	dst    [16]byte
	src    [16]byte
}

func (h *hello) encode(b []byte) {
	_ = b[helloSize-1]
	copy(b[0:4], helloMagic[:])
	b[4] = helloVersion
	b[5] = h.typ
	b[6] = h.status
	b[7] = 0
	copy(b[8:24], h.dst[:])
	copy(b[24:40], h.src[:])
}

// errHelloVersion marks a hello with the right magic and a version this
// build does not speak.
var errHelloVersion = errors.New("unsupported hello version")

// decodeHello parses and validates a hello or its answer. It never panics.
func decodeHello(b []byte, h *hello) error {
	if len(b) < helloSize {
		return fmt.Errorf("short hello (%d bytes): %w", len(b), errWire)
	}
	if [4]byte(b[0:4]) != helloMagic {
		return fmt.Errorf("bad hello magic %q: %w", b[0:4], errWire)
	}
	if b[4] != helloVersion {
		return fmt.Errorf("hello version %d (want %d): %w", b[4], helloVersion, errHelloVersion)
	}
	if b[7] != 0 {
		return fmt.Errorf("nonzero reserved byte in hello: %w", errWire)
	}
	*h = hello{typ: b[5], status: b[6], dst: [16]byte(b[8:24]), src: [16]byte(b[24:40])}
	switch h.typ {
	case helloReq:
		if h.status != 0 {
			return fmt.Errorf("hello with status %d: %w", h.status, errWire)
		}
	case helloAck:
		if h.status > helloStatusMax {
			return fmt.Errorf("hello answer with unknown status %d: %w", h.status, errWire)
		}
	default:
		return fmt.Errorf("unknown hello type %d: %w", h.typ, errWire)
	}
	return nil
}
