package kernels

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

func TestSetLevel(t *testing.T) {
	defer current.Store(current.Load())
	for _, l := range Levels {
		err := SetLevel(l)
		if Supported(l) != (err == nil) {
			t.Fatalf("SetLevel(%s) = %v, but Supported = %v", l, err, Supported(l))
		}
		if err == nil && Current() != l {
			t.Fatalf("SetLevel(%s): Current = %s", l, Current())
		}
	}
	if err := SetLevel(numLevels); err == nil {
		t.Fatal("SetLevel of an unknown level succeeded")
	}
	for _, s := range []string{"off", "AVX2", "avx512"} {
		if _, err := ParseLevel(s); err != nil {
			t.Errorf("ParseLevel(%q): %v", s, err)
		}
	}
	if _, err := ParseLevel("avx3"); err == nil {
		t.Error("ParseLevel(avx3) succeeded")
	}
}

// TestEntryPointsAcrossRuns drives Reduce, Div, Widen and Narrow at every
// level over more than one assembly run (maxRun bytes) and compares the
// results.
func TestEntryPointsAcrossRuns(t *testing.T) {
	defer current.Store(current.Load())
	rng := rand.New(rand.NewPCG(7, 8))
	const n = maxRun + 4104
	a, b := make([]byte, n), make([]byte, n)
	for _, ty := range Types {
		fill(rng, ty.Size(), a)
		fill(rng, ty.Size(), b)
		for _, op := range Ops {
			var want []byte
			for _, l := range Levels {
				if SetLevel(l) != nil {
					continue
				}
				out := make([]byte, n)
				Reduce(ty, op, out, a, b)
				Div(ty, out, 3)
				if want == nil {
					want = out
				} else if !bytes.Equal(out, want) {
					t.Fatalf("%s %s at %s: %s", ty, op, l, firstDiff(ty, out, want, a, b))
				}
			}
		}
	}
	for _, ty := range []Type{F16, BF16} {
		var wide, narrow []byte
		for _, l := range Levels {
			if SetLevel(l) != nil {
				continue
			}
			w, h := make([]byte, 2*n), make([]byte, n/2)
			Widen(ty, w, a)
			Narrow(ty, h, b[:2*len(h)])
			if wide == nil {
				wide, narrow = w, h
			} else if !bytes.Equal(w, wide) || !bytes.Equal(h, narrow) {
				t.Fatalf("%s conversions differ at %s", ty, l)
			}
		}
	}
}

// TestNarrowAllExponents narrows, at every level, float32 values of every
// sign and exponent with mantissas at and around every rounding boundary
// of float16 and bfloat16, and random ones.
func TestNarrowAllExponents(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	mants := []uint32{0, 1, 0x7fffff, 0x400000, 0x3fffff}
	for _, sh := range []uint{13, 16} {
		for _, m := range []uint32{1<<sh - 1, 1 << (sh - 1), 1<<(sh-1) - 1, 1<<(sh-1) + 1, 3 << (sh - 1), 1 << sh} {
			mants = append(mants, m, m|0x7f0000, m|0x2aa000)
		}
	}
	var in []uint32
	for sign := uint32(0); sign < 2; sign++ {
		for e := uint32(0); e < 256; e++ {
			for _, m := range mants {
				in = append(in, sign<<31|e<<23|m&0x7fffff)
			}
			for range 16 {
				in = append(in, sign<<31|e<<23|rng.Uint32()&0x7fffff)
			}
		}
	}
	src := make([]byte, 4*len(in))
	for i, v := range in {
		putUint(src[4*i:], 4, uint64(v))
	}
	for _, l := range vectorLevels(t) {
		for i, ty := range []Type{F16, BF16} {
			want, got := make([]byte, len(in)*2), make([]byte, len(in)*2)
			portableTable.narrow[i](ptr(want), ptr(src), len(in))
			tables[l].narrow[i](ptr(got), ptr(src), len(in))
			if d := firstDiff(ty, got, want, nil, nil); d != "" {
				t.Fatalf("%s narrow %s: %s", l, ty, d)
			}
		}
	}
}

// TestKernelsAllocateNothing: the steady state of a collective allocates
// nothing, kernels included.
func TestKernelsAllocateNothing(t *testing.T) {
	a, b, out := make([]byte, 4096), make([]byte, 4096), make([]byte, 4096)
	wide := make([]byte, 8192)
	allocs := testing.AllocsPerRun(20, func() {
		for _, ty := range Types {
			for _, op := range Ops {
				Reduce(ty, op, out, a, b)
			}
			Div(ty, out, 3)
		}
		Widen(F16, wide, a)
		Narrow(BF16, out[:2048], b)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per run", allocs)
	}
}
