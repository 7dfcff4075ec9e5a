package asmgen

import "fmt"

// Avg's final step, buf[i] /= d in place. There is no vector integer
// division: integers are divided in floating point, which is exact here.
// For |x| < 2^32 and 2 <= d < 2^53, float64(x)/float64(d) is within
// 2^-22/d of x/d while a non-integer x/d is at least 1/d from an integer,
// so truncating gives x/d truncated; 8-bit values likewise in float32 (the
// Go side keeps d < 2^24 there). 64-bit values take two rounds: q0 from
// the float64 quotient (off by at most a few thousand), then the exact
// remainder r = x - q0*d, small enough for the same argument, and
// q0 + floor(r/d) (ceil for negative x). AVX2 has no 64-bit conversions:
// int64 and uint64 stay portable there.

const rodata = `
// VPSHUFB control: byte 0 of each 32-bit lane into the low 4 bytes of each
// 128-bit lane.
DATA shufb<>+0(SB)/8, $0x808080800c080400
DATA shufb<>+8(SB)/8, $0x8080808080808080
DATA shufb<>+16(SB)/8, $0x808080800c080400
DATA shufb<>+24(SB)/8, $0x8080808080808080
GLOBL shufb<>(SB), RODATA|NOPTR, $32
`

// divisor32 and divisor64 broadcast d (R8) as float32 or float64 into dst.
func divisor32(g *gen, dst string) {
	x := "X" + dst[1:]
	g.ins("VCVTSI2SSQ", "R8", x, x)
	g.ins("VBROADCASTSS", x, dst)
}

func divisor64(g *gen, dst string) {
	x := "X" + dst[1:]
	g.ins("VCVTSI2SDQ", "R8", x, x)
	g.ins("VBROADCASTSD", x, dst)
}

func divKernels(g *gen, lv level) {
	for _, e := range []elem{f32, f64, i8, u8, i32, u32, i64, u64} {
		if s := divSpec(lv, e); s != nil {
			g.kernel(s)
		}
	}
	g.kernel(divHalfSpec(lv, "F16"))
	g.kernel(divHalfSpec(lv, "BF16"))
}

func divSpec(lv level, e elem) *spec {
	s := &spec{name: fmt.Sprintf("div%s%s", e.name, lv.name), kind: divKind, lv: lv,
		regs: 1, consts: 1, unroll: 4, table: "div", typ: e.name}
	d := lv.konst(0)
	switch {
	case e.float:
		s.lanes = lv.vbytes() / e.size
		sfx, mv := fsuffix(e.size), move(lv, e)
		s.setup = func(g *gen) {
			if e.size == 4 {
				divisor32(g, d)
			} else {
				divisor64(g, d)
			}
		}
		s.step = func(c *step) {
			c.load(mv, c.mem("DI", e.size), c.r(0))
			c.g.ins("VDIV"+sfx, d, c.r(0), c.r(0))
			c.store(mv, c.r(0), c.mem("DI", e.size))
		}
	case e.size == 1:
		ext := "VPMOVZXBD"
		if e.signed {
			ext = "VPMOVSXBD"
		}
		s.lanes = lv.vbytes() / 4
		s.regs = 2
		s.setup = func(g *gen) {
			divisor32(g, d)
			if !lv.z {
				g.ins("VMOVDQU", "shufb<>(SB)", lv.konst(1))
			}
		}
		if !lv.z {
			s.consts = 2
		}
		s.step = func(c *step) {
			g := c.g
			c.load(ext, c.mem("DI", 1), c.r(0))
			g.ins("VCVTDQ2PS", c.r(0), c.r(0))
			g.ins("VDIVPS", d, c.r(0), c.r(0))
			g.ins("VCVTTPS2DQ", c.r(0), c.r(0))
			if lv.z {
				c.store("VPMOVDB", c.r(0), c.mem("DI", 1))
				return
			}
			g.ins("VPSHUFB", lv.konst(1), c.r(0), c.r(0))
			g.ins("VEXTRACTI128", "$1", c.r(0), c.x(1))
			g.ins("VPUNPCKLDQ", c.x(1), c.x(0), c.x(0))
			g.ins("VMOVQ", c.x(0), c.mem("DI", 1))
		}
	case e.size == 4:
		// Half a vector of int32 per step, as a vector of float64.
		s.lanes = lv.vbytes() / 8
		if lv.z {
			cvt, back := "VCVTDQ2PD", "VCVTTPD2DQ"
			if !e.signed {
				cvt, back = "VCVTUDQ2PD", "VCVTTPD2UDQ"
			}
			s.setup = func(g *gen) { divisor64(g, d) }
			s.step = func(c *step) {
				c.load(cvt, c.mem("DI", 4), c.r(0))
				c.g.ins("VDIVPD", d, c.r(0), c.r(0))
				c.g.ins(back, c.r(0), c.y(0))
				c.store("VMOVDQU32", c.y(0), c.mem("DI", 4))
			}
			break
		}
		// AVX2 converts only signed int32: uint32 goes in with its sign
		// bit flipped and 2^31 added back in float64. The quotient of a
		// uint32 by d >= 2 fits an int32.
		if !e.signed {
			s.consts = 3
		}
		s.setup = func(g *gen) {
			divisor64(g, d)
			if !e.signed {
				g.broadcast32(1<<31, lv.konst(1))
				g.broadcast64(0x41e0000000000000, lv.konst(2)) // 2^31
			}
		}
		s.step = func(c *step) {
			g := c.g
			if e.signed {
				g.ins("VCVTDQ2PD", c.mem("DI", 4), c.r(0))
			} else {
				g.ins("VMOVDQU", c.mem("DI", 4), c.x(0))
				g.ins("VPXOR", "X"+lv.konst(1)[1:], c.x(0), c.x(0))
				g.ins("VCVTDQ2PD", c.x(0), c.r(0))
				g.ins("VADDPD", lv.konst(2), c.r(0), c.r(0))
			}
			g.ins("VDIVPD", d, c.r(0), c.r(0))
			g.ins("VCVTTPD2DQY", c.r(0), c.x(0))
			g.ins("VMOVDQU", c.x(0), c.mem("DI", 4))
		}
	case lv.z: // 64-bit, AVX-512 DQ
		s.lanes, s.regs, s.consts = 8, 4, 2
		di := lv.konst(1)
		s.setup = func(g *gen) {
			divisor64(g, d)
			g.ins("VPBROADCASTQ", "R8", di)
		}
		cvt, back := "VCVTQQ2PD", "VCVTTPD2QQ"
		if !e.signed {
			cvt, back = "VCVTUQQ2PD", "VCVTTPD2UQQ"
		}
		s.step = func(c *step) {
			g := c.g
			c.load("VMOVDQU64", c.mem("DI", 8), c.r(0))
			g.ins(cvt, c.r(0), c.r(1))
			g.ins("VDIVPD", d, c.r(1), c.r(1))
			g.ins(back, c.r(1), c.r(1))          // q0
			g.ins("VPMULLQ", di, c.r(1), c.r(2)) // q0*d
			g.ins("VPSUBQ", c.r(2), c.r(0), c.r(2))
			g.ins("VCVTQQ2PD", c.r(2), c.r(2)) // r, signed and small
			g.ins("VDIVPD", d, c.r(2), c.r(2))
			g.ins("VRNDSCALEPD", "$9", c.r(2), c.r(3)) // floor
			if e.signed {
				g.ins("VPMOVQ2M", c.r(0), c.k())
				g.ins("VRNDSCALEPD", "$10", c.r(2), c.k(), c.r(3)) // ceil where x < 0
			}
			g.ins("VCVTTPD2QQ", c.r(3), c.r(3))
			g.ins("VPADDQ", c.r(3), c.r(1), c.r(0))
			c.store("VMOVDQU64", c.r(0), c.mem("DI", 8))
		}
	default:
		return nil
	}
	return s
}

func divHalfSpec(lv level, typ string) *spec {
	s := &spec{name: fmt.Sprintf("div%s%s", typ, lv.name), kind: divKind, lv: lv,
		lanes: lv.vbytes() / 4, regs: 1, consts: 1, unroll: 4, table: "div", typ: typ}
	d := lv.konst(0)
	if typ == "F16" {
		s.setup = func(g *gen) { divisor32(g, d) }
		s.step = func(c *step) {
			c.load("VCVTPH2PS", c.mem("DI", 2), c.r(0))
			c.g.ins("VDIVPS", d, c.r(0), c.r(0))
			c.store("VCVTPS2PH", "$0", c.r(0), c.mem("DI", 2))
		}
		return s
	}
	s.lanes, s.regs, s.consts, s.unroll = lv.vbytes()/2, 4, 4, 2
	hi, one, bias := lv.konst(1), lv.konst(2), lv.konst(3)
	s.setup = func(g *gen) {
		divisor32(g, d)
		bfSetup(g, lv, 1)
	}
	mv := move(lv, elem{size: 2})
	s.step = func(c *step) {
		g := c.g
		c.load(mv, c.mem("DI", 2), c.r(0))
		g.ins("VPSLLD", "$16", c.r(0), c.r(1))
		g.ins(vand(lv), hi, c.r(0), c.r(2))
		g.ins("VDIVPS", d, c.r(1), c.r(1))
		g.ins("VDIVPS", d, c.r(2), c.r(2))
		// NaN quotients are quiet NaNs with a zero low half, as in the
		// reductions: plain rounding is right for them.
		roundBF16(c, c.r(1), c.r(3), one, bias)
		roundBF16(c, c.r(2), c.r(3), one, bias)
		g.ins("VPSRLD", "$16", c.r(1), c.r(1))
		mergeBF16(c, c.r(2), c.r(1), hi)
		c.store(mv, c.r(1), c.mem("DI", 2))
	}
	return s
}
