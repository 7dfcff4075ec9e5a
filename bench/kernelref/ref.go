//go:build cgo

package kernelref

/*
#cgo CFLAGS: -O3 -march=native
#include <stddef.h>
#include <stdint.h>
#include <string.h>

// The reference loops: what gcc -O3 -march=native makes of d[i] op= s[i].

#define LOOPS(T, name) \
static void sum_##name(T *restrict d, const T *restrict s, size_t n) { for (size_t i = 0; i < n; i++) d[i] += s[i]; } \
static void prod_##name(T *restrict d, const T *restrict s, size_t n) { for (size_t i = 0; i < n; i++) d[i] *= s[i]; } \
static void min_##name(T *restrict d, const T *restrict s, size_t n) { for (size_t i = 0; i < n; i++) d[i] = s[i] < d[i] ? s[i] : d[i]; } \
static void max_##name(T *restrict d, const T *restrict s, size_t n) { for (size_t i = 0; i < n; i++) d[i] = s[i] > d[i] ? s[i] : d[i]; } \
static void avg_##name(T *restrict d, size_t n, int k) { for (size_t i = 0; i < n; i++) d[i] /= k; }

LOOPS(float, f32)
LOOPS(double, f64)
LOOPS(int32_t, i32)
LOOPS(int64_t, i64)
LOOPS(uint8_t, u8)
LOOPS(int8_t, i8)
LOOPS(uint32_t, u32)
LOOPS(uint64_t, u64)

// float16: gcc computes _Float16 arithmetic in float and rounds once.
static void sum_f16(_Float16 *restrict d, const _Float16 *restrict s, size_t n) { for (size_t i = 0; i < n; i++) d[i] = (float)d[i] + (float)s[i]; }
static void prod_f16(_Float16 *restrict d, const _Float16 *restrict s, size_t n) { for (size_t i = 0; i < n; i++) d[i] = (float)d[i] * (float)s[i]; }
static void min_f16(_Float16 *restrict d, const _Float16 *restrict s, size_t n) { for (size_t i = 0; i < n; i++) { float a = d[i], b = s[i]; d[i] = b < a ? b : a; } }
static void max_f16(_Float16 *restrict d, const _Float16 *restrict s, size_t n) { for (size_t i = 0; i < n; i++) { float a = d[i], b = s[i]; d[i] = b > a ? b : a; } }
static void avg_f16(_Float16 *restrict d, size_t n, int k) { float f = k; for (size_t i = 0; i < n; i++) d[i] = (float)d[i] / f; }

// bfloat16 by hand: widen by a shift, round to nearest even on the way back.
static inline float bf(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static inline uint16_t fb(float f) { uint32_t u; memcpy(&u, &f, 4); u += 0x7fff + ((u >> 16) & 1); return u >> 16; }
static void sum_bf16(uint16_t *restrict d, const uint16_t *restrict s, size_t n) { for (size_t i = 0; i < n; i++) d[i] = fb(bf(d[i]) + bf(s[i])); }
static void prod_bf16(uint16_t *restrict d, const uint16_t *restrict s, size_t n) { for (size_t i = 0; i < n; i++) d[i] = fb(bf(d[i]) * bf(s[i])); }
static void min_bf16(uint16_t *restrict d, const uint16_t *restrict s, size_t n) { for (size_t i = 0; i < n; i++) { float a = bf(d[i]), b = bf(s[i]); d[i] = fb(b < a ? b : a); } }
static void max_bf16(uint16_t *restrict d, const uint16_t *restrict s, size_t n) { for (size_t i = 0; i < n; i++) { float a = bf(d[i]), b = bf(s[i]); d[i] = fb(b > a ? b : a); } }
static void avg_bf16(uint16_t *restrict d, size_t n, int k) { float f = k; for (size_t i = 0; i < n; i++) d[i] = fb(bf(d[i]) / f); }

// Type and op numbers are collectives.DataType's and ReduceOp's.
#define CASE(t, name) case t: \
	switch (op) { \
	case 1: sum_##name(d, s, n / sizeof(*d##name)); return 0; \
	case 2: prod_##name(d, s, n / sizeof(*d##name)); return 0; \
	case 3: min_##name(d, s, n / sizeof(*d##name)); return 0; \
	case 4: max_##name(d, s, n / sizeof(*d##name)); return 0; \
	case 5: avg_##name(d, n / sizeof(*d##name), k); return 0; \
	} \
	return -1;

static float *df32; static double *df64; static int32_t *di32; static int64_t *di64; static uint8_t *du8;
static int8_t *di8; static uint32_t *du32; static uint64_t *du64; static _Float16 *df16; static uint16_t *dbf16;

static int ref_run(int type, int op, void *d, const void *s, size_t n, int k) {
	switch (type) {
	CASE(1, f32) CASE(2, f64) CASE(3, i32) CASE(4, i64) CASE(5, u8) CASE(6, i8) CASE(7, u32) CASE(8, u64)
	CASE(9, f16) CASE(10, bf16)
	}
	return -1;
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/goccl/goccl/collectives"
)

// Available says whether the C reference was built (it needs cgo).
const Available = true

// Run runs the C loop of (dt, op) over dst and src (same length): dst[i] =
// dst[i] op src[i], or for Avg dst[i] /= ranks.
func Run(dt collectives.DataType, op collectives.ReduceOp, dst, src []byte, ranks int) {
	if len(dst) == 0 || len(src) != len(dst) {
		panic("kernelref: empty or unequal buffers")
	}
	if C.ref_run(C.int(dt), C.int(op), unsafe.Pointer(&dst[0]), unsafe.Pointer(&src[0]), C.size_t(len(dst)), C.int(ranks)) != 0 {
		panic(fmt.Sprintf("kernelref: no C loop for %s %s", dt, op))
	}
}
