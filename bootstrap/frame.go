package bootstrap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Wire format. Every frame is a 12-byte header followed by a payload:
//
//	offset size field
//	0      2    magic "gc"
//	2      1    protocol version (1)
//	3      1    frame type
//	4      4    request id, big endian (0 in the handshake)
//	8      4    payload length, big endian
//
// Payload fields are big endian; a byte string is a 4-byte length followed
// by its bytes. Each frame type has a maximum payload length, checked before
// anything is allocated.
const (
	frameMagic0   = 'g'
	frameMagic1   = 'c'
	frameVersion  = 1
	headerLen     = 12
	nonceLen      = 32
	macLen        = 32
	MaxKeyLen     = 4 << 10  // longest key, in bytes
	MaxValueLen   = 64 << 20 // longest value, in bytes
	maxWaitKeys   = 1 << 16  // most keys in one Wait
	maxWaitFrame  = 1 << 20  // longest Wait payload
	maxErrMessage = 1 << 12  // longest error message
	maxWillValue  = 1 << 12  // longest value of a will
	maxWills      = 64       // most wills one connection may hold
)

// Frame types.
const (
	typeHello     byte = 1  // C->S: client nonce
	typeChallenge byte = 2  // S->C: server nonce
	typeProof     byte = 3  // C->S: client MAC
	typeWelcome   byte = 4  // S->C: server MAC
	typeSet       byte = 10 // key, value
	typeGet       byte = 11 // key
	typeWait      byte = 12 // count, keys
	typeAdd       byte = 13 // key, delta
	typeCancel    byte = 14 // (id of the request to cancel)
	typeDelete    byte = 15 // count, keys
	typeWill      byte = 16 // key, value: set when the connection ends without a bye
	typeBye       byte = 17 // (empty): the client closes on purpose; no reply
	typeOK        byte = 20 // (empty)
	typeValue     byte = 21 // value
	typeInt       byte = 22 // int64
	typeError     byte = 23 // message
)

// errFrame is wrapped by every decoding error.
var errFrame = errors.New("malformed frame")

// frame is one decoded frame: its header fields and raw payload.
type frame struct {
	typ     byte
	id      uint32
	payload []byte
}

// maxPayload is the longest payload a frame of type typ may carry, or -1 for
// an unknown type.
func maxPayload(typ byte) int {
	switch typ {
	case typeHello, typeChallenge, typeProof, typeWelcome:
		return nonceLen
	case typeSet:
		return 4 + MaxKeyLen + 4 + MaxValueLen
	case typeGet:
		return 4 + MaxKeyLen
	case typeWill:
		return 4 + MaxKeyLen + 4 + maxWillValue
	case typeWait, typeDelete:
		return maxWaitFrame
	case typeAdd:
		return 4 + MaxKeyLen + 8
	case typeCancel, typeOK, typeBye:
		return 0
	case typeValue:
		return 4 + MaxValueLen
	case typeInt:
		return 8
	case typeError:
		return 4 + maxErrMessage
	}
	return -1
}

// parseHeader checks a frame header and returns its type, id and payload
// length. limit further bounds the payload length (the handshake reads only
// small frames).
func parseHeader(h []byte, limit int) (typ byte, id uint32, n int, err error) {
	if len(h) < headerLen {
		return 0, 0, 0, fmt.Errorf("%w: short header", errFrame)
	}
	if h[0] != frameMagic0 || h[1] != frameMagic1 {
		return 0, 0, 0, fmt.Errorf("%w: bad magic %q", errFrame, h[:2])
	}
	if h[2] != frameVersion {
		return 0, 0, 0, fmt.Errorf("%w: protocol version %d, want %d", errFrame, h[2], frameVersion)
	}
	typ = h[3]
	id = binary.BigEndian.Uint32(h[4:8])
	n64 := uint64(binary.BigEndian.Uint32(h[8:12]))
	m := maxPayload(typ)
	if m < 0 {
		return 0, 0, 0, fmt.Errorf("%w: unknown type %d", errFrame, typ)
	}
	if n64 > uint64(m) || n64 > uint64(limit) {
		return 0, 0, 0, fmt.Errorf("%w: type %d payload of %d bytes exceeds limit", errFrame, typ, n64)
	}
	return typ, id, int(n64), nil
}

// readFrame reads one frame whose payload is at most limit bytes.
func readFrame(r io.Reader, limit int) (frame, error) {
	var h [headerLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return frame{}, err
	}
	typ, id, n, err := parseHeader(h[:], limit)
	if err != nil {
		return frame{}, err
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return frame{}, err
	}
	return frame{typ: typ, id: id, payload: p}, nil
}

// appendFrame appends the encoding of f to b.
func appendFrame(b []byte, f frame) []byte {
	b = append(b, frameMagic0, frameMagic1, frameVersion, f.typ)
	b = binary.BigEndian.AppendUint32(b, f.id)
	b = binary.BigEndian.AppendUint32(b, uint32(len(f.payload)))
	return append(b, f.payload...)
}

// appendBytes appends a length-prefixed byte string.
func appendBytes(b, s []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// payloadReader decodes payload fields, remembering the first error.
type payloadReader struct {
	p   []byte
	err error
}

func (r *payloadReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", errFrame, what)
	}
	r.p = nil
}

func (r *payloadReader) uint32() uint32 {
	if len(r.p) < 4 {
		r.fail("truncated length")
		return 0
	}
	v := binary.BigEndian.Uint32(r.p)
	r.p = r.p[4:]
	return v
}

func (r *payloadReader) uint64() uint64 {
	if len(r.p) < 8 {
		r.fail("truncated integer")
		return 0
	}
	v := binary.BigEndian.Uint64(r.p)
	r.p = r.p[8:]
	return v
}

// bytes reads a length-prefixed byte string of at most max bytes. The result
// aliases the payload.
func (r *payloadReader) bytes(max int, what string) []byte {
	n := r.uint32()
	if r.err != nil {
		return nil
	}
	if uint64(n) > uint64(max) {
		r.fail(what + " too long")
		return nil
	}
	if uint64(n) > uint64(len(r.p)) {
		r.fail("truncated " + what)
		return nil
	}
	v := r.p[:n:n]
	r.p = r.p[n:]
	return v
}

// done reports the first error, or an error if bytes are left over.
func (r *payloadReader) done() error {
	if r.err == nil && len(r.p) != 0 {
		r.err = fmt.Errorf("%w: %d trailing bytes", errFrame, len(r.p))
	}
	return r.err
}

// request is a decoded client command.
type request struct {
	typ   byte
	id    uint32
	key   string
	keys  []string // typeWait, typeDelete
	value []byte   // typeSet, typeWill
	delta int64    // typeAdd
}

// decodeRequest decodes a command frame sent by a client after the
// handshake.
func decodeRequest(f frame) (request, error) {
	q := request{typ: f.typ, id: f.id}
	r := payloadReader{p: f.payload}
	switch f.typ {
	case typeSet:
		q.key = string(r.bytes(MaxKeyLen, "key"))
		q.value = r.bytes(MaxValueLen, "value")
	case typeWill:
		q.key = string(r.bytes(MaxKeyLen, "key"))
		q.value = r.bytes(maxWillValue, "value")
	case typeGet:
		q.key = string(r.bytes(MaxKeyLen, "key"))
	case typeAdd:
		q.key = string(r.bytes(MaxKeyLen, "key"))
		q.delta = int64(r.uint64())
	case typeWait, typeDelete:
		n := r.uint32()
		if r.err == nil && (n == 0 || n > maxWaitKeys || uint64(n)*4 > uint64(len(r.p))) {
			r.fail("bad key count")
		}
		if r.err == nil {
			q.keys = make([]string, 0, n)
			for i := uint32(0); i < n && r.err == nil; i++ {
				q.keys = append(q.keys, string(r.bytes(MaxKeyLen, "key")))
			}
		}
	case typeCancel, typeBye:
	default:
		return request{}, fmt.Errorf("%w: type %d is not a command", errFrame, f.typ)
	}
	if err := r.done(); err != nil {
		return request{}, err
	}
	return q, nil
}

// encodeRequest is the inverse of decodeRequest.
func encodeRequest(q request) frame {
	var p []byte
	switch q.typ {
	case typeSet, typeWill:
		p = appendBytes(p, []byte(q.key))
		p = appendBytes(p, q.value)
	case typeGet:
		p = appendBytes(p, []byte(q.key))
	case typeAdd:
		p = appendBytes(p, []byte(q.key))
		p = binary.BigEndian.AppendUint64(p, uint64(q.delta))
	case typeWait, typeDelete:
		p = binary.BigEndian.AppendUint32(p, uint32(len(q.keys)))
		for _, k := range q.keys {
			p = appendBytes(p, []byte(k))
		}
	}
	return frame{typ: q.typ, id: q.id, payload: p}
}

// response is a decoded server reply.
type response struct {
	typ   byte
	id    uint32
	value []byte // typeValue
	n     int64  // typeInt
	msg   string // typeError
}

// decodeResponse decodes a reply frame sent by the server after the
// handshake.
func decodeResponse(f frame) (response, error) {
	s := response{typ: f.typ, id: f.id}
	r := payloadReader{p: f.payload}
	switch f.typ {
	case typeOK:
	case typeValue:
		s.value = r.bytes(MaxValueLen, "value")
	case typeInt:
		s.n = int64(r.uint64())
	case typeError:
		s.msg = string(r.bytes(maxErrMessage, "message"))
	default:
		return response{}, fmt.Errorf("%w: type %d is not a reply", errFrame, f.typ)
	}
	if err := r.done(); err != nil {
		return response{}, err
	}
	return s, nil
}

// encodeResponse is the inverse of decodeResponse.
func encodeResponse(s response) frame {
	var p []byte
	switch s.typ {
	case typeValue:
		p = appendBytes(p, s.value)
	case typeInt:
		p = binary.BigEndian.AppendUint64(p, uint64(s.n))
	case typeError:
		m := s.msg
		if len(m) > maxErrMessage {
			m = m[:maxErrMessage]
		}
		p = appendBytes(p, []byte(m))
	}
	return frame{typ: s.typ, id: s.id, payload: p}
}
