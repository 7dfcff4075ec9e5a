package kernels

import (
	"strings"
	"unsafe"

	"github.com/klauspost/cpuid/v2"
)

// The features each level needs. cpuid reports AVX and AVX-512 only when
// the operating system saves their registers.
var levelFeatures = [numLevels][]cpuid.FeatureID{
	AVX2:   {cpuid.AVX, cpuid.AVX2, cpuid.F16C, cpuid.BMI2},
	AVX512: {cpuid.AVX512F, cpuid.AVX512BW, cpuid.AVX512DQ, cpuid.AVX512VL, cpuid.F16C, cpuid.BMI2},
}

func missing(l Level) string {
	var lack []string
	for _, f := range levelFeatures[l] {
		if !cpuid.CPU.Supports(f) {
			lack = append(lack, f.String())
		}
	}
	if len(lack) == 0 {
		return "not supported"
	}
	return "this CPU lacks " + strings.Join(lack, ", ")
}

func simdTables() (t [numLevels]*table) {
	for _, l := range []Level{AVX2, AVX512} {
		if cpuid.CPU.Supports(levelFeatures[l]...) {
			t[l] = asmTable(l)
		}
	}
	return t
}

// The generated assembly (zkernels_amd64.*) lists its kernels in these
// shapes. lanes is 0 for a kernel that handles any n, else the step it
// handles whole multiples of.
type asmReduceKernel struct {
	level Level
	typ   Type
	op    Op
	fn    kernel
	lanes int
}

type asmDivKernel struct {
	level Level
	typ   Type
	fn    divKernel
	lanes int
}

type asmConvKernel struct {
	level  Level
	typ    Type
	narrow bool
	fn     convKernel
	lanes  int
}

// asmTable builds level l's table from the generated assembly, with the
// portable kernel wherever there is none. AVX2 kernels handle whole vectors
// only: the portable code finishes the last few elements. AVX-512 kernels
// finish with a masked vector themselves.
func asmTable(l Level) *table {
	t := *portableTable
	t.level = l
	for _, k := range asmReduce {
		if k.level == l {
			t.reduce[k.typ][k.op] = withTail(k.fn, portableReduce[k.typ][k.op], k.lanes, k.typ.Size())
		}
	}
	for _, k := range asmDiv {
		if k.level == l {
			t.div[k.typ] = withDivTail(k.fn, portableDiv[k.typ], k.lanes, k.typ.Size())
		}
	}
	for _, k := range asmConv {
		if k.level != l {
			continue
		}
		if i := halfIndex(k.typ); k.narrow {
			t.narrow[i] = withConvTail(k.fn, portableTable.narrow[i], k.lanes, 2, 4)
		} else {
			t.widen[i] = withConvTail(k.fn, portableTable.widen[i], k.lanes, 4, 2)
		}
	}
	return &t
}

// withTail runs k on the whole vectors of lanes elements and tail on the
// rest; lanes 0 means k does it all.
func withTail(k, tail kernel, lanes, size int) kernel {
	if lanes == 0 {
		return k
	}
	return func(out, a, b unsafe.Pointer, n int) {
		m := n - n%lanes
		if m > 0 {
			k(out, a, b, m)
		}
		if m < n {
			o := m * size
			tail(unsafe.Add(out, o), unsafe.Add(a, o), unsafe.Add(b, o), n-m)
		}
	}
}

func withDivTail(k, tail divKernel, lanes, size int) divKernel {
	if lanes == 0 {
		return k
	}
	return func(p unsafe.Pointer, n int, d int) {
		m := n - n%lanes
		if m > 0 {
			k(p, m, d)
		}
		if m < n {
			tail(unsafe.Add(p, m*size), n-m, d)
		}
	}
}

func withConvTail(k, tail convKernel, lanes, dsize, ssize int) convKernel {
	if lanes == 0 {
		return k
	}
	return func(dst, src unsafe.Pointer, n int) {
		m := n - n%lanes
		if m > 0 {
			k(dst, src, m)
		}
		if m < n {
			tail(unsafe.Add(dst, m*dsize), unsafe.Add(src, m*ssize), n-m)
		}
	}
}
