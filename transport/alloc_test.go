package transport

import (
	"errors"
	"runtime/debug"
	"testing"
)

// TestFreedMemoryStaysMapped checks that a slice used after Free never
// faults (a fault kills a Go program), that Alloc hands out freed memory
// again, zeroed, and that Free refuses what Alloc did not return.
func TestFreedMemoryStaysMapped(t *testing.T) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true)) // a fault fails the test instead of killing it
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("use after Free faulted: %v", p)
		}
	}()
	for _, n := range []int{1, 4096, 3<<20 + 5} {
		b, err := Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		b[0], b[n-1] = 1, 2
		if err := Free(b); err != nil {
			t.Fatal(err)
		}
		b[0], b[n-1] = 3, 4 // stale writes
		_ = b[n/2]
		again, err := Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		if again[0] != 0 || again[n-1] != 0 {
			t.Errorf("Alloc(%d) after Free: not zeroed (%d, %d)", n, again[0], again[n-1])
		}
		if len(again) != n || cap(again) != n {
			t.Errorf("Alloc(%d): len %d cap %d", n, len(again), cap(again))
		}
		if err := Free(again[:1]); err != nil {
			t.Errorf("Free of a reslice from the start: %v", err)
		}
	}
	big, err := Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if err := Free(big[4096:]); !errors.Is(err, ErrInvalid) {
		t.Errorf("Free of a subslice: %v, want ErrInvalid", err)
	}
	if err := Free(make([]byte, 10)); !errors.Is(err, ErrInvalid) {
		t.Errorf("Free of Go memory: %v, want ErrInvalid", err)
	}
	if err := Free(big); err != nil {
		t.Fatal(err)
	}
	if err := Free(big); !errors.Is(err, ErrInvalid) {
		t.Errorf("second Free: %v, want ErrInvalid", err)
	}
	// A smaller request reuses part of a freed range.
	small, err := Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer Free(small)
	small[0] = 9
	big[0] = 7 // stale: may be small's memory now, but never faults
}
