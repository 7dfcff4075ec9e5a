// Package asmgen writes the amd64 assembly of package kernels
// (zkernels_amd64.s) and its Go declarations (zkernels_amd64.go). Run it
// with go generate in package kernels; a test there checks that the files
// in the tree are what it writes.
//
// Every kernel is one loop skeleton (loop) around a step: the instructions
// that handle one vector's worth of elements at element index AX. The
// skeleton runs the step unrolled, then one vector at a time, then (AVX-512
// only) once more under a lane mask K1 for the last elements; AVX2 kernels
// handle whole vectors and leave the rest to the portable Go code.
package asmgen

import (
	"fmt"
	"go/format"
	"strings"
)

// level is a vector instruction set.
type level struct {
	name string // AVX2, AVX512
	z    bool   // 64-byte Z registers, mask registers
}

var (
	avx2   = level{name: "AVX2"}
	avx512 = level{name: "AVX512", z: true}
)

// reg names vector register i at the level's width.
func (l level) reg(i int) string {
	if l.z {
		return fmt.Sprintf("Z%d", i)
	}
	return fmt.Sprintf("Y%d", i)
}

// konst is the register of constant i (counted down from the top).
func (l level) konst(i int) string {
	if l.z {
		return l.reg(31 - i)
	}
	return l.reg(15 - i)
}

func (l level) nregs() int {
	if l.z {
		return 32
	}
	return 16
}

// vbytes is the vector width in bytes.
func (l level) vbytes() int {
	if l.z {
		return 64
	}
	return 32
}

// kind is a kernel's Go signature.
type kind int

const (
	reduceKind kind = iota // (out, a, b unsafe.Pointer, n int)
	divKind                // (p unsafe.Pointer, n int, d int)
	convKind               // (dst, src unsafe.Pointer, n int)
)

// spec is one kernel.
type spec struct {
	name   string
	kind   kind
	lv     level
	lanes  int // elements per step
	regs   int // vector registers per step (step u uses [u*regs, (u+1)*regs))
	consts int // constant registers at the top
	unroll int
	setup  func(g *gen)
	step   func(c *step)
	// Go-side table entry: "reduce", "div", "widen", "narrow", its type
	// and op constant names.
	table, typ, op string
}

// step is the context of one emitted step.
type step struct {
	g      *gen
	s      *spec
	u      int  // unroll index
	masked bool // the last, partial vector: loads and stores under K1
}

// r is the step's i-th vector register.
func (c *step) r(i int) string {
	if i >= c.s.regs {
		panic(fmt.Sprintf("%s: register %d of %d", c.s.name, i, c.s.regs))
	}
	return c.s.lv.reg(c.u*c.s.regs + i)
}

// x is the 128-bit name of the step's i-th register; y the 256-bit one.
func (c *step) x(i int) string { return "X" + c.r(i)[1:] }
func (c *step) y(i int) string { return "Y" + c.r(i)[1:] }

// k is the step's own mask register (K2..K6).
func (c *step) k() string { return fmt.Sprintf("K%d", 2+c.u) }

// mem is the step's elements of size bytes each at base.
func (c *step) mem(base string, size int) string {
	return fmt.Sprintf("%d(%s)(AX*%d)", c.u*c.s.lanes*size, base, size)
}

// load emits "instr src, dst", zero-masked by K1 in the masked step.
func (c *step) load(instr, src, dst string) {
	if c.masked {
		c.g.ins(instr+".Z", src, "K1", dst)
		return
	}
	c.g.ins(instr, src, dst)
}

// store emits "instr [imm,] src, dst" masked by K1 in the masked step.
func (c *step) store(instr string, args ...string) {
	if c.masked {
		args = append(args[:len(args)-1:len(args)-1], "K1", args[len(args)-1])
	}
	c.g.ins(instr, args...)
}

// operand is src as an instruction's memory operand, or in the masked step
// loaded into register reg first (a masked load suppresses faults on the
// lanes past the end; a plain memory operand would not).
func (c *step) operand(instr, src, reg string) string {
	if c.masked {
		c.load(instr, src, reg)
		return reg
	}
	return src
}

type gen struct {
	s     strings.Builder
	specs []*spec
}

func (g *gen) ins(op string, args ...string) {
	fmt.Fprintf(&g.s, "\t%s\t%s\n", op, strings.Join(args, ", "))
}

func (g *gen) label(l string) { fmt.Fprintf(&g.s, "%s:\n", l) }

func (g *gen) comment(format string, args ...any) {
	fmt.Fprintf(&g.s, "\t// "+format+"\n", args...)
}

// broadcast32 puts the 32-bit constant v in every lane of register dst.
func (g *gen) broadcast32(v uint32, dst string) {
	x := "X" + dst[1:]
	g.ins("MOVL", fmt.Sprintf("$%#x", v), "R9")
	g.ins("VMOVD", "R9", x)
	g.ins("VPBROADCASTD", x, dst)
}

// broadcast64 puts the 64-bit constant v in every lane of register dst.
func (g *gen) broadcast64(v uint64, dst string) {
	x := "X" + dst[1:]
	g.ins("MOVQ", fmt.Sprintf("$%#x", v), "R9")
	g.ins("VMOVQ", "R9", x)
	g.ins("VPBROADCASTQ", x, dst)
}

// kernel emits s.
func (g *gen) kernel(s *spec) {
	if s.unroll*s.regs+s.consts > s.lv.nregs() || s.unroll > 5 {
		panic(fmt.Sprintf("%s: %d steps of %d registers and %d constants do not fit", s.name, s.unroll, s.regs, s.consts))
	}
	g.specs = append(g.specs, s)
	L := s.lanes
	switch s.kind {
	case reduceKind:
		fmt.Fprintf(&g.s, "\n// func %s(out, a, b unsafe.Pointer, n int)\nTEXT ·%s(SB), NOSPLIT, $0-32\n", s.name, s.name)
		g.ins("MOVQ", "out+0(FP)", "DI")
		g.ins("MOVQ", "a+8(FP)", "SI")
		g.ins("MOVQ", "b+16(FP)", "DX")
		g.ins("MOVQ", "n+24(FP)", "CX")
	case divKind:
		fmt.Fprintf(&g.s, "\n// func %s(p unsafe.Pointer, n int, d int)\nTEXT ·%s(SB), NOSPLIT, $0-24\n", s.name, s.name)
		g.ins("MOVQ", "p+0(FP)", "DI")
		g.ins("MOVQ", "n+8(FP)", "CX")
		g.ins("MOVQ", "d+16(FP)", "R8")
	case convKind:
		fmt.Fprintf(&g.s, "\n// func %s(dst, src unsafe.Pointer, n int)\nTEXT ·%s(SB), NOSPLIT, $0-24\n", s.name, s.name)
		g.ins("MOVQ", "dst+0(FP)", "DI")
		g.ins("MOVQ", "src+8(FP)", "SI")
		g.ins("MOVQ", "n+16(FP)", "CX")
	}
	g.ins("XORQ", "AX", "AX")
	if s.setup != nil {
		s.setup(g)
	}
	if s.unroll > 1 {
		g.ins("MOVQ", "CX", "BX")
		g.ins("SUBQ", fmt.Sprintf("$%d", s.unroll*L), "BX")
		g.ins("JL", "one")
		g.label("loop")
		for u := range s.unroll {
			s.step(&step{g: g, s: s, u: u})
		}
		g.ins("ADDQ", fmt.Sprintf("$%d", s.unroll*L), "AX")
		g.ins("CMPQ", "AX", "BX")
		g.ins("JLE", "loop")
		g.label("one")
	}
	g.ins("LEAQ", fmt.Sprintf("-%d(CX)", L), "BX")
	g.ins("CMPQ", "AX", "BX")
	g.ins("JG", "tail")
	g.label("loop1")
	s.step(&step{g: g, s: s})
	g.ins("ADDQ", fmt.Sprintf("$%d", L), "AX")
	g.ins("CMPQ", "AX", "BX")
	g.ins("JLE", "loop1")
	g.label("tail")
	if s.lv.z {
		g.ins("CMPQ", "AX", "CX")
		g.ins("JGE", "done")
		g.ins("MOVQ", "CX", "BX")
		g.ins("SUBQ", "AX", "BX")
		g.ins("MOVQ", "$-1", "R9")
		g.ins("BZHIQ", "BX", "R9", "R9")
		g.ins(map[int]string{8: "KMOVB", 16: "KMOVW", 32: "KMOVD", 64: "KMOVQ"}[L], "R9", "K1")
		s.step(&step{g: g, s: s, masked: true})
		g.label("done")
	}
	g.ins("VZEROUPPER")
	g.ins("RET")
}

// Files returns the generated files by name.
func Files() (map[string][]byte, error) {
	g := &gen{}
	g.s.WriteString("// Code generated by asmgen (go generate). DO NOT EDIT.\n\n#include \"textflag.h\"\n")
	for _, lv := range []level{avx2, avx512} {
		reduceKernels(g, lv)
		halfKernels(g, lv)
		divKernels(g, lv)
	}
	g.s.WriteString(rodata)
	goSrc, err := g.decls()
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		"zkernels_amd64.s":  []byte(g.s.String()),
		"zkernels_amd64.go": goSrc,
	}, nil
}

// decls writes the Go declarations and the tables simd_amd64.go reads.
func (g *gen) decls() ([]byte, error) {
	var b strings.Builder
	b.WriteString("// Code generated by asmgen (go generate). DO NOT EDIT.\n\npackage kernels\n\nimport \"unsafe\"\n\n")
	for _, s := range g.specs {
		b.WriteString("//go:noescape\n")
		switch s.kind {
		case reduceKind:
			fmt.Fprintf(&b, "func %s(out, a, b unsafe.Pointer, n int)\n\n", s.name)
		case divKind:
			fmt.Fprintf(&b, "func %s(p unsafe.Pointer, n int, d int)\n\n", s.name)
		case convKind:
			fmt.Fprintf(&b, "func %s(dst, src unsafe.Pointer, n int)\n\n", s.name)
		}
	}
	// Lanes: 0 for AVX-512 (the kernel finishes with a masked step),
	// else the step's elements (the Go wrapper finishes the rest).
	lanes := func(s *spec) int {
		if s.lv.z {
			return 0
		}
		return s.lanes
	}
	b.WriteString("var asmReduce = []asmReduceKernel{\n")
	for _, s := range g.specs {
		if s.table == "reduce" {
			fmt.Fprintf(&b, "{%s, %s, %s, %s, %d},\n", s.lv.name, s.typ, s.op, s.name, lanes(s))
		}
	}
	b.WriteString("}\n\nvar asmDiv = []asmDivKernel{\n")
	for _, s := range g.specs {
		if s.table == "div" {
			fmt.Fprintf(&b, "{%s, %s, %s, %d},\n", s.lv.name, s.typ, s.name, lanes(s))
		}
	}
	b.WriteString("}\n\nvar asmConv = []asmConvKernel{\n")
	for _, s := range g.specs {
		if s.table == "widen" || s.table == "narrow" {
			fmt.Fprintf(&b, "{%s, %s, %t, %s, %d},\n", s.lv.name, s.typ, s.table == "narrow", s.name, lanes(s))
		}
	}
	b.WriteString("}\n")
	return format.Source([]byte(b.String()))
}
