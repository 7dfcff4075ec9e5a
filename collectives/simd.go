package collectives

import (
	"fmt"

	"github.com/goccl/goccl/collectives/internal/kernels"
)

// SetSIMD chooses the vector instructions of the reduction kernels for the
// whole process: "off" (portable Go), "avx2", "avx512", or "auto" (the best
// this CPU has, the default at start). It fails, changing nothing, for an
// unknown name or a level this CPU lacks. Every level gives the same
// results bit for bit; the choice exists for tests and for users who need
// to rule the vector code out. Safe for concurrent use.
func SetSIMD(level string) error {
	l := kernels.Best()
	if level != "auto" {
		var err error
		if l, err = kernels.ParseLevel(level); err != nil {
			return fmt.Errorf("SIMD level %q: want auto, off, avx2 or avx512", level)
		}
	}
	return kernels.SetLevel(l)
}

// SIMD names the level in use: "off", "avx2" or "avx512".
func SIMD() string { return kernels.Current().String() }

// SIMDLevels lists the levels this CPU can run, lowest first ("off" is
// always there).
func SIMDLevels() []string {
	var ls []string
	for _, l := range kernels.Levels {
		if kernels.Supported(l) {
			ls = append(ls, l.String())
		}
	}
	return ls
}
