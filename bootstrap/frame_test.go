package bootstrap

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
)

func TestRequestRoundTrip(t *testing.T) {
	for _, q := range []request{
		{typ: typeSet, id: 1, key: "k", value: []byte("v")},
		{typ: typeSet, id: 2, key: "", value: []byte{}},
		{typ: typeGet, id: 3, key: "some/key"},
		{typ: typeAdd, id: 4, key: "n", delta: -7},
		{typ: typeWait, id: 5, keys: []string{"a", "", "ccc"}},
		{typ: typeCancel, id: 6},
		{typ: typeDelete, id: 7, keys: []string{"x"}},
		{typ: typeWill, id: 8, key: "goccl/gone/3", value: []byte("pid 77")},
		{typ: typeBye, id: 0},
	} {
		b := appendFrame(nil, encodeRequest(q))
		f, err := readFrame(bytes.NewReader(b), maxPayload(typeSet))
		if err != nil {
			t.Fatalf("%+v: read: %v", q, err)
		}
		got, err := decodeRequest(f)
		if err != nil {
			t.Fatalf("%+v: decode: %v", q, err)
		}
		if !reflect.DeepEqual(got, q) {
			t.Fatalf("round trip: got %+v, want %+v", got, q)
		}
	}
}

func TestResponseRoundTrip(t *testing.T) {
	for _, s := range []response{
		{typ: typeOK, id: 1},
		{typ: typeValue, id: 2, value: []byte("xyz")},
		{typ: typeValue, id: 2, value: []byte{}},
		{typ: typeInt, id: 3, n: -1 << 62},
		{typ: typeError, id: 4, msg: "wrong secret"},
	} {
		b := appendFrame(nil, encodeResponse(s))
		f, err := readFrame(bytes.NewReader(b), maxPayload(typeValue))
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeResponse(f)
		if err != nil || !reflect.DeepEqual(got, s) {
			t.Fatalf("round trip: got %+v, %v; want %+v", got, err, s)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	hdr := func(magic string, version, typ byte, n uint32) []byte {
		b := append([]byte(magic), version, typ, 0, 0, 0, 1)
		return append(b, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	for name, in := range map[string][]byte{
		"bad magic":        hdr("xx", 1, typeGet, 0),
		"bad version":      hdr("gc", 2, typeGet, 0),
		"unknown type":     hdr("gc", 1, 99, 0),
		"oversized get":    hdr("gc", 1, typeGet, 4+MaxKeyLen+1),
		"oversized cancel": hdr("gc", 1, typeCancel, 1),
		"short header":     []byte("gc\x01"),
		"short payload":    append(hdr("gc", 1, typeGet, 10), 0, 0, 0, 6, 'k'),
	} {
		_, err := readFrame(bytes.NewReader(in), maxPayload(typeSet))
		if err == nil {
			t.Errorf("%s: readFrame accepted %x", name, in)
		}
	}
	for name, f := range map[string]frame{
		"key length past end":   {typ: typeGet, payload: []byte{0, 0, 0, 9, 'k'}},
		"trailing bytes":        {typ: typeGet, payload: []byte{0, 0, 0, 1, 'k', 'x'}},
		"key too long":          {typ: typeGet, payload: append([]byte{0, 0, 0x10, 0x01}, make([]byte, 4097)...)},
		"wait zero keys":        {typ: typeWait, payload: []byte{0, 0, 0, 0}},
		"wait count past end":   {typ: typeWait, payload: []byte{0, 0, 0, 3, 0, 0, 0, 0}},
		"add truncated":         {typ: typeAdd, payload: []byte{0, 0, 0, 0, 1, 2}},
		"will value too long":   {typ: typeWill, payload: append([]byte{0, 0, 0, 1, 'k', 0, 0, 0x10, 0x01}, make([]byte, 4097)...)},
		"bye with a payload":    {typ: typeBye, payload: []byte{1}},
		"reply type as command": {typ: typeOK},
	} {
		if _, err := decodeRequest(f); !errors.Is(err, errFrame) {
			t.Errorf("%s: decodeRequest err = %v, want errFrame", name, err)
		}
	}
	if _, err := decodeResponse(frame{typ: typeSet}); !errors.Is(err, errFrame) {
		t.Errorf("decodeResponse accepted a command")
	}
}

// fuzzReadWriter feeds a handshake from fuzz input and swallows its output.
type fuzzReadWriter struct{ io.Reader }

func (fuzzReadWriter) Write(p []byte) (int, error) { return len(p), nil }

// FuzzDecodeFrame decodes arbitrary bytes as a stream of frames, as both a
// command and a reply; it must never panic, and what it accepts must
// re-encode to the same bytes.
func FuzzDecodeFrame(f *testing.F) {
	for _, s := range seedFrames() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		for {
			fr, err := readFrame(r, maxPayload(typeSet))
			if err != nil {
				return
			}
			raw := appendFrame(nil, fr)
			if q, err := decodeRequest(fr); err == nil {
				if again := appendFrame(nil, encodeRequest(q)); !bytes.Equal(again, raw) {
					t.Fatalf("request %+v re-encodes to %x, decoded from %x", q, again, raw)
				}
			}
			if s, err := decodeResponse(fr); err == nil {
				if again := appendFrame(nil, encodeResponse(s)); !bytes.Equal(again, raw) {
					t.Fatalf("response %+v re-encodes to %x, decoded from %x", s, again, raw)
				}
			}
		}
	})
}

// FuzzDecodeHandshake runs both sides of the handshake against arbitrary
// peer bytes: no panic, and no success without the secret.
func FuzzDecodeHandshake(f *testing.F) {
	for _, s := range seedFrames() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := serverHandshake(fuzzReadWriter{bytes.NewReader(data)}, testSecret); err == nil {
			t.Fatalf("server accepted a client that cannot know the nonce: %x", data)
		}
		if err := clientHandshake(fuzzReadWriter{bytes.NewReader(data)}, testSecret); err == nil {
			t.Fatalf("client accepted a server that cannot know the nonce: %x", data)
		}
	})
}

// FuzzDecodeHostlist parses arbitrary Slurm host lists and task counts.
func FuzzDecodeHostlist(f *testing.F) {
	for _, s := range []string{"n[0-3],x7", "gpu[01-02]-a", "r[1-2]n[0-1]", "a,b", "n[", "2(x3),1", "4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if hosts, err := expandHostlist(s); err == nil && (len(hosts) == 0 || len(hosts) > maxHosts) {
			t.Fatalf("expandHostlist(%q): %d hosts", s, len(hosts))
		}
		if n, err := parseTasksPerNode(s); err == nil && len(n) == 0 {
			t.Fatalf("parseTasksPerNode(%q): no nodes", s)
		}
	})
}

// FuzzDecodeGathered decodes arbitrary bytes as rank 0's combined
// Allgather value: no panic, and what it accepts re-encodes identically.
func FuzzDecodeGathered(f *testing.F) {
	f.Add(encodeGathered([][]byte{[]byte("a"), {}, []byte("ccc")}), 3)
	f.Add([]byte{0, 0, 0, 1, 0, 0, 0, 9}, 1)
	f.Fuzz(func(t *testing.T, data []byte, size int) {
		if size < 0 || size > 1<<16 {
			return
		}
		v, err := decodeGathered(data, size)
		if err == nil && !bytes.Equal(encodeGathered(v), data) {
			t.Fatalf("%x decodes to %q which re-encodes differently", data, v)
		}
	})
}

func seedFrames() [][]byte {
	var seeds [][]byte
	for _, q := range []request{
		{typ: typeSet, id: 1, key: "goccl/ag/1/0", value: []byte("addr")},
		{typ: typeGet, id: 2, key: "k"},
		{typ: typeAdd, id: 3, key: "n", delta: 1},
		{typ: typeWait, id: 4, keys: []string{"a", "b"}},
		{typ: typeCancel, id: 5},
		{typ: typeDelete, id: 6, keys: []string{"a", "b"}},
		{typ: typeWill, id: 7, key: "goccl/gone/1", value: []byte("pid 9")},
		{typ: typeBye},
	} {
		seeds = append(seeds, appendFrame(nil, encodeRequest(q)))
	}
	for _, s := range []response{
		{typ: typeOK, id: 1}, {typ: typeValue, id: 2, value: []byte("v")},
		{typ: typeInt, id: 3, n: 4}, {typ: typeError, id: 4, msg: "wrong secret"},
	} {
		seeds = append(seeds, appendFrame(nil, encodeResponse(s)))
	}
	hello := appendFrame(nil, frame{typ: typeHello, payload: make([]byte, nonceLen)})
	proof := appendFrame(nil, frame{typ: typeProof, payload: make([]byte, macLen)})
	seeds = append(seeds, hello, append(append([]byte{}, hello...), proof...),
		appendFrame(nil, frame{typ: typeChallenge, payload: make([]byte, nonceLen)}))
	return seeds
}

// TestWriteSeedCorpus regenerates testdata/fuzz from seedFrames when
// GOCCL_WRITE_CORPUS=1; otherwise it checks the corpus exists.
func TestWriteSeedCorpus(t *testing.T) {
	for _, name := range []string{"FuzzDecodeFrame", "FuzzDecodeHandshake"} {
		dir := filepath.Join("testdata", "fuzz", name)
		if os.Getenv("GOCCL_WRITE_CORPUS") == "1" {
			os.MkdirAll(dir, 0o755)
			for i, s := range seedFrames() {
				body := "go test fuzz v1\n[]byte(" + strconv.Quote(string(s)) + ")\n"
				if err := os.WriteFile(filepath.Join(dir, "seed"+strconv.Itoa(i)), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*"))
		if len(files) < len(seedFrames()) {
			t.Fatalf("%s: %d seed files, want at least %d (run with GOCCL_WRITE_CORPUS=1)", dir, len(files), len(seedFrames()))
		}
	}
}
