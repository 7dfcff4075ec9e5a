package tcp

import (
	"runtime"
	"testing"
)

// An endpoint keeps the small buffers that its messages borrow: taking
// and returning them across garbage collections, which empty the shared
// pool, allocates nothing once each size has been used (4 at a time).
func TestSmallBuffersStayWithEndpoint(t *testing.T) {
	e := &endpoint{}
	sizes := [...]int{100, 5000, 10000, 32 << 10} // 4, 8, 16, 32 KiB
	var held [4][len(sizes)]*[]byte
	cycle := func() {
		for i := range held {
			for j, n := range sizes {
				held[i][j] = e.getBuf(n)
				if b := held[i][j]; len(*b) < n {
					t.Fatalf("getBuf(%d) returned %d bytes", n, len(*b))
				}
			}
		}
		for i := range held {
			for j := range sizes {
				e.putBuf(held[i][j])
				held[i][j] = nil
			}
		}
	}
	cycle()
	if allocs := testing.AllocsPerRun(20, func() {
		runtime.GC()
		runtime.GC()
		cycle()
	}); allocs != 0 {
		t.Errorf("%.1f allocations a cycle of %d small buffers after two collections, want 0", allocs, len(held)*len(sizes))
	}
}
