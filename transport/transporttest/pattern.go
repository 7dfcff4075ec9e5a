package transporttest

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// Fill writes a cheap deterministic pattern derived from seed into b. Two
// different seeds give different contents at every 8-byte word.
func Fill(b []byte, seed uint64) {
	x := seed*0x9E3779B97F4A7C15 + 0x2545F4914F6CDD1D
	i := 0
	for ; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], x)
		x += 0x9E3779B97F4A7C15
	}
	for ; i < len(b); i++ {
		b[i] = byte(x)
		x >>= 8
	}
}

// Pattern returns n bytes of Fill(seed).
func Pattern(n int, seed uint64) []byte {
	b := make([]byte, n)
	Fill(b, seed)
	return b
}

// ExpectBytes fails the test if got and want differ, naming the first
// differing offset.
func ExpectBytes(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	if len(got) != len(want) {
		t.Fatalf("%s: length %d, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: first difference at byte %d of %d: %#x, want %#x", what, i, len(got), got[i], want[i])
		}
	}
}

// expectAll fails the test unless every byte of b is v.
func expectAll(t testing.TB, what string, b []byte, v byte) {
	t.Helper()
	for i, c := range b {
		if c != v {
			t.Fatalf("%s: byte %d of %d is %#x, want %#x (untouched)", what, i, len(b), c, v)
		}
	}
}

func fillByte(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}
