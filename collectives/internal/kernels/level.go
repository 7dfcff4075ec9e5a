package kernels

import (
	"fmt"
	"strings"
	"sync/atomic"
)

// Level is a set of vector instructions the kernels use.
type Level uint8

const (
	// Portable is plain Go: every CPU and architecture.
	Portable Level = iota
	// AVX2 is amd64 with AVX2 and F16C (Haswell, Zen and later).
	AVX2
	// AVX512 is amd64 with AVX-512 F, BW, DQ and VL, plus F16C and BMI2
	// (Skylake-SP, Ice Lake, Zen 4 and later).
	AVX512
	numLevels
)

// Levels lists every level, lowest first.
var Levels = []Level{Portable, AVX2, AVX512}

// String is the level's name in GOCCL_SIMD: off, avx2 or avx512.
func (l Level) String() string {
	switch l {
	case Portable:
		return "off"
	case AVX2:
		return "avx2"
	case AVX512:
		return "avx512"
	}
	return fmt.Sprintf("level(%d)", uint8(l))
}

// ParseLevel reads a level's name: off, avx2 or avx512 (any case).
func ParseLevel(s string) (Level, error) {
	for _, l := range Levels {
		if strings.EqualFold(s, l.String()) {
			return l, nil
		}
	}
	return 0, fmt.Errorf("unknown SIMD level %q: want off, avx2 or avx512", s)
}

// table is the kernels of one level.
type table struct {
	level  Level
	reduce [numTypes][numOps]kernel
	div    [numTypes]divKernel
	widen  [2]convKernel // F16, BF16
	narrow [2]convKernel
}

func halfIndex(t Type) int {
	if t == BF16 {
		return 1
	}
	return 0
}

var portableTable = &table{level: Portable, reduce: portableReduce, div: portableDiv,
	widen:  [2]convKernel{widenPortable(F16ToF32), widenPortable(BF16ToF32)},
	narrow: [2]convKernel{narrowPortable(F32ToF16), narrowPortable(F32ToBF16)}}

// tables holds the table of every level this CPU supports (nil for the
// others); simdTables (per architecture) fills in the vector levels.
var tables = func() [numLevels]*table {
	t := simdTables()
	t[Portable] = portableTable
	return t
}()

// current is the table in use: the best level the CPU supports, until
// SetLevel says otherwise.
var current atomic.Pointer[table]

func init() { current.Store(tables[Best()]) }

// Best is the highest level this CPU supports.
func Best() Level {
	for l := numLevels - 1; l > Portable; l-- {
		if tables[l] != nil {
			return l
		}
	}
	return Portable
}

// Supported reports whether this CPU (and build) can run level l.
func Supported(l Level) bool { return l < numLevels && tables[l] != nil }

// Current is the level in use.
func Current() Level { return current.Load().level }

// SetLevel makes every later kernel call use level l. It fails, changing
// nothing, if this CPU lacks l. Safe for concurrent use; a kernel call
// already running finishes on the level it started with (every level gives
// the same bits).
func SetLevel(l Level) error {
	if l >= numLevels {
		return fmt.Errorf("unknown SIMD level %d", uint8(l))
	}
	if !Supported(l) {
		return fmt.Errorf("SIMD level %s: %s", l, missing(l))
	}
	current.Store(tables[l])
	return nil
}
