package asmgen

import "fmt"

// elem is an element type as the generator sees it.
type elem struct {
	name   string // the kernels constant: F32, I8, ...
	size   int
	float  bool
	signed bool
}

var (
	f32 = elem{"F32", 4, true, true}
	f64 = elem{"F64", 8, true, true}
	i8  = elem{"I8", 1, false, true}
	u8  = elem{"U8", 1, false, false}
	i32 = elem{"I32", 4, false, true}
	u32 = elem{"U32", 4, false, false}
	i64 = elem{"I64", 8, false, true}
	u64 = elem{"U64", 8, false, false}
)

var ops = []string{"Sum", "Prod", "Min", "Max"}

// isuffix is the integer instruction suffix of a size.
func isuffix(size int) string { return map[int]string{1: "B", 2: "W", 4: "D", 8: "Q"}[size] }

// move is the load/store instruction for elements of size bytes (on
// AVX-512 the mask granularity must match the element).
func move(lv level, e elem) string {
	switch {
	case e.float && e.size == 4:
		return "VMOVUPS"
	case e.float:
		return "VMOVUPD"
	case lv.z:
		return fmt.Sprintf("VMOVDQU%d", 8*e.size)
	}
	return "VMOVDQU"
}

// fsuffix is PS or PD.
func fsuffix(size int) string {
	if size == 4 {
		return "PS"
	}
	return "PD"
}

// fop emits r = a op b on floats of size bytes, with the semantics of the
// portable code (float.go in package kernels): IEEE sum and product, whose
// NaN is a's made quiet, else b's (amd64 takes the first source operand:
// Intel's "vaddps r, a, b" is Go's "VADDPS b, a, r"); min and max with -0 <
// +0 and a NaN chosen as for sum. b may be a memory operand for sum and
// prod. t1 and t2 are scratch registers (AVX2 min and max).
func fop(c *step, op string, size int, a, b, r, t1, t2 string) {
	g, sfx := c.g, fsuffix(size)
	switch op {
	case "Sum":
		g.ins("VADD"+sfx, b, a, r)
		return
	case "Prod":
		g.ins("VMUL"+sfx, b, a, r)
		return
	}
	if c.s.lv.z {
		// VRANGE with imm 4 (min) or 5 (max), sign from the comparison,
		// orders -0 < +0; its NaN rule differs from ours, so lanes with a
		// NaN are overwritten with a + b, which picks the NaN as Sum does.
		imm := map[string]string{"Min": "$4", "Max": "$5"}[op]
		g.ins("VRANGE"+sfx, imm, b, a, r)
		g.ins("VCMP"+sfx, "$3", b, a, c.k()) // unordered
		g.ins("VADD"+sfx, b, a, c.k(), r)
		return
	}
	// VMIN (a < b ? a : b) and VMAX (a > b ? a : b) give b for equal
	// operands and NaNs: equal lanes take a|b (min: -0 wins) or a&b (max:
	// +0 wins), unordered lanes a + b.
	mm, bit := "VMIN"+sfx, "VOR"+sfx
	if op == "Max" {
		mm, bit = "VMAX"+sfx, "VAND"+sfx
	}
	g.ins(mm, b, a, r)
	g.ins("VCMP"+sfx, "$0", b, a, t1) // equal (ordered)
	g.ins(bit, b, a, t2)
	g.ins("VBLENDV"+sfx, t1, t2, r, r)
	g.ins("VCMP"+sfx, "$3", b, a, t1) // unordered
	g.ins("VADD"+sfx, b, a, t2)
	g.ins("VBLENDV"+sfx, t1, t2, r, r)
}

func reduceKernels(g *gen, lv level) {
	for _, e := range []elem{f32, f64, i8, u8, i32, u32, i64, u64} {
		for _, op := range ops {
			g.kernel(reduceSpec(lv, e, op))
		}
	}
}

func reduceSpec(lv level, e elem, op string) *spec {
	s := &spec{name: fmt.Sprintf("reduce%s%s%s", op, e.name, lv.name), kind: reduceKind, lv: lv,
		lanes: lv.vbytes() / e.size, regs: 3, unroll: 4, table: "reduce", typ: e.name, op: op}
	mv := move(lv, e)
	if e.float {
		if op == "Min" || op == "Max" {
			s.regs = 5
		}
		if !lv.z {
			s.unroll = 2
		}
		s.step = func(c *step) {
			c.load(mv, c.mem("SI", e.size), c.r(0))
			var b string
			if op == "Sum" || op == "Prod" {
				b = c.operand(mv, c.mem("DX", e.size), c.r(1))
			} else {
				c.load(mv, c.mem("DX", e.size), c.r(1))
				b = c.r(1)
			}
			t1, t2 := "", ""
			if s.regs == 5 {
				t1, t2 = c.r(3), c.r(4)
			}
			fop(c, op, e.size, c.r(0), b, c.r(2), t1, t2)
			c.store(mv, c.r(2), c.mem("DI", e.size))
		}
		return s
	}
	sfx := isuffix(e.size)
	sign := "U"
	if e.signed {
		sign = "S"
	}
	// body computes r(2) from a in r(0) and b (register or memory).
	var body func(c *step, b string)
	switch {
	case op == "Sum":
		body = func(c *step, b string) { c.g.ins("VPADD"+sfx, b, c.r(0), c.r(2)) }
	case op == "Prod" && e.size == 4:
		body = func(c *step, b string) { c.g.ins("VPMULLD", b, c.r(0), c.r(2)) }
	case op == "Prod" && e.size == 8 && lv.z:
		body = func(c *step, b string) { c.g.ins("VPMULLQ", b, c.r(0), c.r(2)) }
	case op == "Prod" && e.size == 8:
		// lo(a)*lo(b) + (hi(a)*lo(b) + lo(a)*hi(b)) << 32
		s.regs, s.unroll = 5, 2
		body = func(c *step, b string) {
			g, a, bb := c.g, c.r(0), c.r(1)
			if b != bb {
				g.ins("VMOVDQU", b, bb)
			}
			g.ins("VPSRLQ", "$32", a, c.r(3))
			g.ins("VPMULUDQ", bb, c.r(3), c.r(3))
			g.ins("VPSRLQ", "$32", bb, c.r(4))
			g.ins("VPMULUDQ", c.r(4), a, c.r(4))
			g.ins("VPADDQ", c.r(4), c.r(3), c.r(3))
			g.ins("VPSLLQ", "$32", c.r(3), c.r(3))
			g.ins("VPMULUDQ", bb, a, c.r(2))
			g.ins("VPADDQ", c.r(3), c.r(2), c.r(2))
		}
	case op == "Prod" && e.size == 1:
		// No byte multiply: multiply 16-bit words twice, once for the even
		// bytes (the low byte of a word product is the product of the low
		// bytes) and once for the odd bytes shifted down, and merge.
		s.regs = 5
		if lv.z {
			s.setup = func(g *gen) {
				g.ins("MOVQ", "$0x5555555555555555", "R9")
				g.ins("KMOVQ", "R9", "K7")
			}
		} else {
			s.consts, s.unroll = 1, 2
			s.setup = func(g *gen) { g.broadcast32(0x00ff00ff, lv.konst(0)) }
		}
		body = func(c *step, b string) {
			g, a, bb := c.g, c.r(0), c.r(1)
			if b != bb {
				g.ins(mv, b, bb)
			}
			g.ins("VPMULLW", bb, a, c.r(3)) // even bytes
			g.ins("VPSRLW", "$8", a, c.r(2))
			g.ins("VPSRLW", "$8", bb, c.r(4))
			g.ins("VPMULLW", c.r(4), c.r(2), c.r(2))
			g.ins("VPSLLW", "$8", c.r(2), c.r(2)) // odd bytes
			if lv.z {
				g.ins("VMOVDQU8", c.r(3), "K7", c.r(2))
			} else {
				g.ins("VPAND", lv.konst(0), c.r(3), c.r(3))
				g.ins("VPOR", c.r(3), c.r(2), c.r(2))
			}
		}
	case e.size == 8 && !lv.z:
		// AVX2 has no 64-bit min or max: compare (unsigned: with the sign
		// bits flipped) and blend.
		s.regs, s.unroll = 5, 2
		if !e.signed {
			s.consts = 1
			s.setup = func(g *gen) { g.broadcast64(1<<63, lv.konst(0)) }
		}
		body = func(c *step, b string) {
			g, a, bb := c.g, c.r(0), c.r(1)
			if b != bb {
				g.ins("VMOVDQU", b, bb)
			}
			x, y := a, bb
			if !e.signed {
				g.ins("VPXOR", lv.konst(0), a, c.r(3))
				g.ins("VPXOR", lv.konst(0), bb, c.r(4))
				x, y = c.r(3), c.r(4)
			}
			g.ins("VPCMPGTQ", y, x, c.r(3)) // a > b
			if op == "Min" {
				g.ins("VBLENDVPD", c.r(3), bb, a, c.r(2))
			} else {
				g.ins("VBLENDVPD", c.r(3), a, bb, c.r(2))
			}
		}
	default: // min, max
		body = func(c *step, b string) {
			c.g.ins(fmt.Sprintf("VP%s%s%s", map[string]string{"Min": "MIN", "Max": "MAX"}[op], sign, sfx), b, c.r(0), c.r(2))
		}
	}
	s.step = func(c *step) {
		c.load(mv, c.mem("SI", e.size), c.r(0))
		body(c, c.operand(mv, c.mem("DX", e.size), c.r(1)))
		c.store(mv, c.r(2), c.mem("DI", e.size))
	}
	return s
}
