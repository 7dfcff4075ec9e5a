package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
)

// Every decoder of bytes from the network is fuzzed. The seed corpus lives
// in testdata/fuzz/<Target>/ and is regenerated from the encoders with
//
//	GOCCL_WRITE_CORPUS=1 go test -run TestWriteFuzzCorpus ./transport/tcp/

func seedHeaders() [][]byte {
	hs := []header{
		{typ: msgSend, id: 1, length: 8},
		{typ: msgSend, id: 2},
		{typ: msgWrite, id: 3, key: 0xdeadbeef, offset: 16, length: 4096},
		{typ: msgWrite, id: 4, key: 1, length: 8, flags: flagImm, imm: 0xcafe},
		{typ: msgReadReq, id: 5, key: 1, offset: 8, length: 8},
		{typ: msgReadResp, id: 5, length: 8},
		{typ: msgAck, kind: kindSend, length: 3},
		{typ: msgAck, kind: kindWrite, length: 1},
		{typ: msgNak, kind: kindWrite, id: 3, status: statusBounds, key: 0xdeadbeef, offset: 16, length: 4096, aux: 16},
		{typ: msgNak, kind: kindSend, id: 1, status: statusLength, length: 8, aux: 4},
		{typ: msgWrite, id: 6, key: 1, offset: ^uint64(0), length: ^uint64(0)},
	}
	var out [][]byte
	for _, h := range hs {
		b := make([]byte, headerSize)
		h.encode(b)
		out = append(out, b)
	}
	return out
}

func seedHellos() [][]byte {
	var out [][]byte
	for _, h := range []hello{
		{typ: helloReq, dst: [16]byte{1}, src: [16]byte{2}},
		{typ: helloAck, status: helloOK, dst: [16]byte{1}, src: [16]byte{2}},
		{typ: helloAck, status: helloUnknown},
		{typ: helloAck, status: helloVersionMismatch},
	} {
		b := make([]byte, helloSize)
		h.encode(b)
		out = append(out, b)
	}
	return append(out, []byte("gcth"), []byte("GET / HTTP/1.1\r\n\r\n"))
}

func seedAddresses() [][]byte {
	var out [][]byte
	for _, a := range []address{
		{ip: netip.MustParseAddr("127.0.0.1"), port: 4242, token: [16]byte{1, 2, 3}},
		{ip: netip.MustParseAddr("10.77.0.3"), port: 65535},
		{ip: netip.MustParseAddr("fe80::1"), port: 1, token: [16]byte{0xff}},
	} {
		out = append(out, a.encode())
	}
	return append(out, []byte{}, []byte("gct"))
}

// seedStreams are frame sequences a peer might send after the handshake;
// key 1 stands for the fuzzed endpoint's registered region.
func seedStreams() [][]byte {
	frame := func(h header, payload []byte) []byte {
		b := make([]byte, headerSize)
		h.encode(b)
		return append(b, payload...)
	}
	cat := func(fs ...[]byte) []byte { return bytes.Join(fs, nil) }
	p8 := []byte("abcdefgh")
	return [][]byte{
		cat(frame(header{typ: msgSend, id: 1, length: 8}, p8), frame(header{typ: msgSend, id: 2, length: 8}, p8)),
		cat(frame(header{typ: msgWrite, id: 1, key: 1, offset: 8, length: 8}, p8),
			frame(header{typ: msgWrite, id: 2, key: 1, length: 8, flags: flagImm, imm: 7}, p8),
			frame(header{typ: msgReadReq, id: 3, key: 1, offset: 0, length: 16}, nil)),
		frame(header{typ: msgWrite, id: 1, key: 1, offset: 60, length: 8}, p8),
		frame(header{typ: msgWrite, id: 1, key: 2, length: 8}, p8),
		frame(header{typ: msgSend, id: 1, length: 100}, bytes.Repeat(p8, 13)),
		frame(header{typ: msgAck, kind: kindWrite, length: 1}, nil),
		frame(header{typ: msgReadResp, id: 1, length: 8}, p8),
		frame(header{typ: msgNak, kind: kindRead, status: statusBadKey, id: 1}, nil),
		[]byte("garbage after a good handshake"),
	}
}

const fuzzMax = 1 << 20

func FuzzDecodeHeader(f *testing.F) {
	for _, s := range seedHeaders() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var h header
		if err := decodeHeader(b, &h, fuzzMax); err != nil {
			return
		}
		out := make([]byte, headerSize)
		h.encode(out)
		if !bytes.Equal(out, b[:headerSize]) {
			t.Fatalf("round trip: %x -> %+v -> %x", b[:headerSize], h, out)
		}
	})
}

func FuzzDecodeHello(f *testing.F) {
	for _, s := range seedHellos() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var h hello
		if err := decodeHello(b, &h); err != nil {
			return
		}
		out := make([]byte, helloSize)
		h.encode(out)
		if !bytes.Equal(out, b[:helloSize]) {
			t.Fatalf("round trip: %x -> %+v -> %x", b[:helloSize], h, out)
		}
	})
}

func FuzzDecodeAddress(f *testing.F) {
	for _, s := range seedAddresses() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := decodeAddress(b)
		if err != nil {
			return
		}
		if out := a.encode(); !bytes.Equal(out, b) {
			t.Fatalf("round trip: %x -> %v -> %x", b, a.String(), out)
		}
	})
}

// fuzzTarget is one device shared by the iterations of FuzzPeerStream.
var fuzzTarget struct {
	once sync.Once
	dev  *Device
	cq   transport.CompletionQueue
	reg  transport.Region
	err  error
}

// FuzzPeerStream plays a peer that completes the handshake and then sends
// arbitrary bytes; the endpoint must fail cleanly (or carry on), never
// panic or hang, and the device must keep serving.
func FuzzPeerStream(f *testing.F) {
	for _, s := range seedStreams() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		ft := &fuzzTarget
		ft.once.Do(func() {
			o := Options{ListenAddress: "127.0.0.1:0", MaxMessage: fuzzMax, LingerTimeout: time.Second, Logger: slog.New(slog.DiscardHandler)}
			if ft.dev, ft.err = NewDevice(o); ft.err != nil {
				return
			}
			if ft.cq, ft.err = ft.dev.NewCompletionQueue(64); ft.err != nil {
				return
			}
			ft.reg, ft.err = ft.dev.Register(make([]byte, 64), transport.AccessAll)
		})
		if ft.err != nil {
			t.Fatal(ft.err)
		}
		ep, err := ft.dev.NewEndpoint(ft.cq)
		if err != nil {
			t.Fatal(err)
		}
		e := ep.(*endpoint)
		defer e.Close()
		// A peer blob that sorts first (port 1), so the endpoint accepts.
		peer := address{ip: ft.dev.host, port: 1, token: [16]byte{0xaa}}
		if err := e.Connect(context.Background(), peer.encode()); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			e.PostRecv(uint64(i), ft.reg, 0, 32)
		}
		c, err := net.Dial("tcp", ft.dev.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		var hb [helloSize]byte
		h := hello{typ: helloReq, dst: e.token, src: peer.token}
		h.encode(hb[:])
		if _, err := c.Write(hb[:]); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, hb[:]); err != nil {
			t.Fatal(err)
		}
		// Key 1 in a header-aligned position names the real region.
		s := append([]byte(nil), stream...)
		for i := 0; i+headerSize <= len(s); i += headerSize {
			if binary.BigEndian.Uint64(s[i+16:]) == 1 {
				binary.BigEndian.PutUint64(s[i+16:], ft.reg.Remote().Key)
			}
		}
		go func() {
			c.Write(s)
			c.(*net.TCPConn).CloseWrite()
		}()
		io.Copy(io.Discard, c) // until the endpoint closes its side
		e.Close()
		var cs [64]transport.Completion
		for ft.cq.Poll(cs[:]) > 0 {
		}
	})
}

// TestWriteFuzzCorpus regenerates testdata/fuzz from the encoders.
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("GOCCL_WRITE_CORPUS") == "" {
		t.Skip("set GOCCL_WRITE_CORPUS=1 to regenerate testdata/fuzz")
	}
	for target, seeds := range map[string][][]byte{
		"FuzzDecodeHeader":  seedHeaders(),
		"FuzzDecodeHello":   seedHellos(),
		"FuzzDecodeAddress": seedAddresses(),
		"FuzzPeerStream":    seedStreams(),
	} {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, s := range seeds {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(s)))
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
