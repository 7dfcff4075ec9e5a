package asmgen

import "fmt"

// float16 goes through F16C: VCVTPH2PS widens exactly (quieting NaNs) and
// VCVTPS2PH with imm 0 rounds to nearest even, both as the portable code
// does. bfloat16 needs no instruction to widen (a shift), and is narrowed
// with integer arithmetic: x + 0x7fff + (x>>16 & 1), then the top half,
// with NaNs made quiet. (AVX512-BF16's VCVTNEPS2BF16 would round in one
// instruction but flushes subnormal results to zero.) Reductions keep
// bfloat16 pairs in place: the even elements widen with a shift left, the
// odd ones with a mask, and the rounded results merge back.

const (
	bfHi    = 0xffff0000
	bfOne   = 1
	bfBias  = 0x7fff
	bfQuiet = 0x40
)

// vand and vor are the bitwise instructions of a level (AVX-512 has no VEX
// encoding for Z registers).
func vand(lv level) string {
	if lv.z {
		return "VPANDD"
	}
	return "VPAND"
}

func vor(lv level) string {
	if lv.z {
		return "VPORD"
	}
	return "VPOR"
}

// roundBF16 rounds the float32 bits in x to nearest even at bit 16 (the
// result's top half is the bfloat16), using t; not for NaNs.
func roundBF16(c *step, x, t string, one, bias string) {
	g := c.g
	g.ins("VPSRLD", "$16", x, t)
	g.ins(vand(c.s.lv), one, t, t)
	g.ins("VPADDD", bias, t, t)
	g.ins("VPADDD", t, x, x)
}

// bfSetup loads the bfloat16 constants into the level's constant registers
// from first on: high-half mask, 1, rounding bias.
func bfSetup(g *gen, lv level, first int) {
	g.broadcast32(bfHi, lv.konst(first))
	g.broadcast32(bfOne, lv.konst(first+1))
	g.broadcast32(bfBias, lv.konst(first+2))
}

func halfKernels(g *gen, lv level) {
	for _, op := range ops {
		g.kernel(f16ReduceSpec(lv, op))
		g.kernel(bf16ReduceSpec(lv, op))
	}
	g.kernel(convSpec(lv, "widen", "F16"))
	g.kernel(convSpec(lv, "widen", "BF16"))
	g.kernel(convSpec(lv, "narrow", "F16"))
	g.kernel(convSpec(lv, "narrow", "BF16"))
}

func f16ReduceSpec(lv level, op string) *spec {
	s := &spec{name: fmt.Sprintf("reduce%sF16%s", op, lv.name), kind: reduceKind, lv: lv,
		lanes: lv.vbytes() / 4, regs: 5, unroll: 4, table: "reduce", typ: "F16", op: op}
	if !lv.z {
		s.unroll = 2
	}
	s.step = func(c *step) {
		c.load("VCVTPH2PS", c.mem("SI", 2), c.r(0))
		c.load("VCVTPH2PS", c.mem("DX", 2), c.r(1))
		fop(c, op, 4, c.r(0), c.r(1), c.r(2), c.r(3), c.r(4))
		c.store("VCVTPS2PH", "$0", c.r(2), c.mem("DI", 2))
	}
	return s
}

func bf16ReduceSpec(lv level, op string) *spec {
	s := &spec{name: fmt.Sprintf("reduce%sBF16%s", op, lv.name), kind: reduceKind, lv: lv,
		lanes: lv.vbytes() / 2, regs: 9, consts: 3, unroll: 2, table: "reduce", typ: "BF16", op: op}
	if !lv.z {
		s.unroll = 1
	}
	hi, one, bias := lv.konst(0), lv.konst(1), lv.konst(2)
	s.setup = func(g *gen) { bfSetup(g, lv, 0) }
	mv := move(lv, elem{size: 2})
	s.step = func(c *step) {
		g := c.g
		c.load(mv, c.mem("SI", 2), c.r(0))
		c.load(mv, c.mem("DX", 2), c.r(1))
		g.ins("VPSLLD", "$16", c.r(0), c.r(2)) // a, even elements
		g.ins(vand(lv), hi, c.r(0), c.r(3))    // a, odd elements
		g.ins("VPSLLD", "$16", c.r(1), c.r(4))
		g.ins(vand(lv), hi, c.r(1), c.r(5))
		fop(c, op, 4, c.r(2), c.r(4), c.r(6), c.r(7), c.r(8)) // even
		fop(c, op, 4, c.r(3), c.r(5), c.r(2), c.r(7), c.r(8)) // odd
		// A NaN result is an operand's (low half zero) made quiet, or the
		// default NaN: rounding adds at most 0x8000 to a zero low half
		// and leaves it as is, so no NaN case is needed here. Min and Max
		// yield an operand, the OR or AND of two (equal zeros), or a
		// NaN, all with a zero low half: exact, nothing to round.
		if op == "Sum" || op == "Prod" {
			roundBF16(c, c.r(6), c.r(7), one, bias)
			roundBF16(c, c.r(2), c.r(7), one, bias)
		}
		g.ins("VPSRLD", "$16", c.r(6), c.r(6))
		mergeBF16(c, c.r(2), c.r(6), hi)
		c.store(mv, c.r(6), c.mem("DI", 2))
	}
	return s
}

// mergeBF16 sets the odd 16-bit elements of even (whose even elements are
// in place) from the top halves of odd.
func mergeBF16(c *step, odd, even, hi string) {
	if c.s.lv.z {
		c.g.ins("VPTERNLOGD", "$0xd8", hi, odd, even) // hi ? odd : even
		return
	}
	c.g.ins("VPBLENDW", "$0xaa", odd, even, even)
}

func convSpec(lv level, dir, typ string) *spec {
	s := &spec{name: fmt.Sprintf("%s%s%s", dir, typ, lv.name), kind: convKind, lv: lv,
		lanes: lv.vbytes() / 4, regs: 1, unroll: 4, table: dir, typ: typ}
	mv32 := move(lv, elem{size: 4})
	switch {
	case dir == "widen" && typ == "F16":
		s.step = func(c *step) {
			c.load("VCVTPH2PS", c.mem("SI", 2), c.r(0))
			c.store("VMOVUPS", c.r(0), c.mem("DI", 4))
		}
	case dir == "widen":
		s.step = func(c *step) {
			c.load("VPMOVZXWD", c.mem("SI", 2), c.r(0))
			c.g.ins("VPSLLD", "$16", c.r(0), c.r(0))
			c.store(mv32, c.r(0), c.mem("DI", 4))
		}
	case typ == "F16":
		s.step = func(c *step) {
			c.load("VMOVUPS", c.mem("SI", 4), c.r(0))
			c.store("VCVTPS2PH", "$0", c.r(0), c.mem("DI", 2))
		}
	case lv.z:
		// bfloat16: round, and for NaN lanes the top half made quiet.
		s.regs, s.consts, s.unroll = 3, 4, 4
		one, bias, quiet := lv.konst(1), lv.konst(2), lv.konst(3)
		s.setup = func(g *gen) {
			bfSetup(g, lv, 0)
			g.broadcast32(bfQuiet, quiet)
		}
		s.step = func(c *step) {
			g := c.g
			c.load(mv32, c.mem("SI", 4), c.r(0))
			g.ins("VPSRLD", "$16", c.r(0), c.r(1))
			g.ins("VPANDD", one, c.r(1), c.r(2))
			g.ins("VPADDD", bias, c.r(2), c.r(2))
			g.ins("VPADDD", c.r(0), c.r(2), c.r(2))
			g.ins("VPSRLD", "$16", c.r(2), c.r(2))
			g.ins("VCMPPS", "$3", c.r(0), c.r(0), c.k())
			g.ins("VPORD", quiet, c.r(1), c.k(), c.r(2))
			c.store("VPMOVDW", c.r(2), c.mem("DI", 2))
		}
	default:
		// bfloat16 on AVX2: two vectors of float32 per step, packed to
		// 16-bit (in 128-bit lanes, hence the permutation).
		s.lanes, s.regs, s.consts, s.unroll = 16, 6, 4, 2
		one, bias, quiet := lv.konst(1), lv.konst(2), lv.konst(3)
		s.setup = func(g *gen) {
			bfSetup(g, lv, 0)
			g.broadcast32(bfQuiet, quiet)
		}
		s.step = func(c *step) {
			g := c.g
			g.ins("VMOVDQU", c.mem("SI", 4), c.r(0))
			g.ins("VMOVDQU", fmt.Sprintf("%d(SI)(AX*4)", c.u*s.lanes*4+32), c.r(1))
			for i := range 2 {
				x, res, t, m := c.r(i), c.r(2+i), c.r(4), c.r(5)
				g.ins("VPSRLD", "$16", x, t)
				g.ins("VPAND", one, t, res)
				g.ins("VPADDD", bias, res, res)
				g.ins("VPADDD", x, res, res)
				g.ins("VPSRLD", "$16", res, res)
				g.ins("VCMPPS", "$3", x, x, m)
				g.ins("VPOR", quiet, t, t)
				g.ins("VBLENDVPS", m, t, res, res)
			}
			g.ins("VPACKUSDW", c.r(3), c.r(2), c.r(2))
			g.ins("VPERMQ", "$0xd8", c.r(2), c.r(2))
			g.ins("VMOVDQU", c.r(2), c.mem("DI", 2))
		}
	}
	return s
}
