// Package commtest holds checks that run goccl's collectives on a
// communicator and verify every result against an independent reference
// (small-integer inputs, reductions computed in float64 with gonum), for
// the comm package's tests and for programs that check a real job (the
// collcheck example, the Soft-RoCE run). It imports comm, transport/mem,
// transport/tcp, gonum and the standard library.
package commtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"gonum.org/v1/gonum/floats"

	. "github.com/goccl/goccl/comm"
)

// value is rank r's element i: small integers, so every reduction is exact
// in every type (8-bit types included; float16 and bfloat16 up to 64
// ranks, whose sums stay within 256) and results compare bitwise, Avg's
// quotient rounded as the type rounds it.
func value(op Op, r, i int) float64 {
	if op == Prod {
		return []float64{1, -1, 1, 1, -1}[(r+2*i)%5]
	}
	if op.Bitwise() {
		// Bit patterns that differ by rank and element, within int8
		// (negative ones set the high bits of every width).
		return float64((r*37+(i%period)*11)%97 - 48)
	}
	return float64((r*7+i*3)%9 - 4)
}

func unsigned[T Number]() bool {
	switch TypeOf[T]() {
	case TypeFloat16, TypeBFloat16:
		return false // stored in a uint16, signed as values
	}
	var z T
	return z-1 > 0
}

// of is v as a T: Float16 and BFloat16 by value, rounded to nearest even
// (Go's conversion to their uint16 would give the bits v, a subnormal),
// the others as Go converts.
func of[T Number](v float64) T {
	var z T
	switch any(z).(type) {
	case Float16:
		return any(F16(float32(v))).(T)
	case BFloat16:
		return any(BF16(float32(v))).(T)
	}
	return T(v)
}

// period is how often value repeats along i: (i*3)%9 every 3 elements,
// Prod's (r+2*i)%5 every 5. Inputs and expected results are computed for
// one period and tiled: the checks cost little beside the collectives
// they check (a third of the tables' time, and more under the race
// detector, when computed per element).
const period = 15

func input[T Number](op Op, r, i int) T {
	v := value(op, r, i)
	if unsigned[T]() {
		v = math.Abs(v)
	}
	return of[T](v)
}

func inputs[T Number](op Op, r, n int) []T {
	out := make([]T, n)
	fill(out, op, r)
	return out
}

// fill sets dst to rank r's inputs for op.
func fill[T Number](dst []T, op Op, r int) {
	for i := range min(period, len(dst)) {
		dst[i] = input[T](op, r, i)
	}
	for done := period; done < len(dst); done *= 2 {
		copy(dst[done:], dst[:done])
	}
}

// wants are the reductions over n ranks of elements 0 to period-1: the
// result of element i is wants[i%period].
func wants[T Number](op Op, n int) []T {
	out := make([]T, period)
	for i := range out {
		out[i] = want[T](op, n, i)
	}
	return out
}

// want is the reduction of element i over n ranks, computed in float64
// with gonum, then as the type would round it.
func want[T Number](op Op, n, i int) T {
	vals := make([]float64, n)
	for r := range n {
		vals[r] = value(op, r, i)
		if unsigned[T]() {
			vals[r] = math.Abs(vals[r])
		}
	}
	switch op {
	case BAnd, BOr, BXor:
		// On the integers' bits, in int64: the two's complement of a
		// negative value, cut to T's width by the conversion.
		acc := int64(T(vals[0]))
		for _, v := range vals[1:] {
			x := int64(T(v))
			switch op {
			case BAnd:
				acc &= x
			case BOr:
				acc |= x
			default:
				acc ^= x
			}
		}
		return T(acc)
	case Sum:
		return of[T](floats.Sum(vals))
	case Prod:
		return of[T](floats.Prod(vals))
	case Min:
		return of[T](floats.Min(vals))
	case Max:
		return of[T](floats.Max(vals))
	case Avg:
		s := floats.Sum(vals)
		switch TypeOf[T]() {
		case TypeFloat32, TypeFloat64:
			return T(s) / T(n)
		case TypeFloat16, TypeBFloat16:
			// The sum (exact), divided in float32 and rounded once
			// (kernels.Div).
			return of[T](float64(float32(s) / float32(n)))
		}
		return T(math.Trunc(s / float64(n)))
	}
	panic("op")
}

// algosOf are the algorithms a check runs coll with: each one forced,
// then "" (the selector's choice), or only "" if coll has one algorithm.
func algosOf(coll string) []string {
	if a := Algorithms(coll); len(a) > 1 {
		return append(a, "")
	}
	return []string{""}
}

func withAlgo(a string) []CallOption {
	if a == "" {
		return nil // the selector's choice
	}
	return []CallOption{WithAlgorithm(a)}
}

// CheckAll runs every collective with every algorithm (forced, then the
// selector's choice) on count elements (or blocks of count) of type T in
// plain slices, and checks each result; reductions use ops. It runs one
// check per collective (see Checks), in order, and stops at the first that
// fails, with an error naming it. Every rank of c must call it with the
// same arguments.
func CheckAll[T Number](ctx context.Context, c *Comm, count int, ops []Op) error {
	return checkAll[T](ctx, c, count, ops, false)
}

// CheckAllRegistered is CheckAll on buffers from comm.Alloc: memory
// registered with the transport, which the collectives use directly
// instead of through staging copies.
func CheckAllRegistered[T Number](ctx context.Context, c *Comm, count int, ops []Op) error {
	return checkAll[T](ctx, c, count, ops, true)
}

// Checks names CheckAll's checks, one per collective, in the order it
// runs them.
func Checks() []string {
	var names []string
	for _, ch := range checksOf[int8]() {
		names = append(names, ch.name)
	}
	return names
}

// A check runs one collective with every algorithm it has on buffers from
// k and verifies the results (colls.go).
type check[T Number] struct {
	name string
	run  func(ctx context.Context, k *checker[T]) error
}

func checksOf[T Number]() []check[T] {
	return []check[T]{
		{"allreduce", checkAllreduce[T]},
		{"reduce", checkReduce[T]},
		{"broadcast", checkBroadcast[T]},
		{"allgather", checkAllgather[T]},
		{"allgatherv", checkAllgatherv[T]},
		{"reduce-scatter", checkReduceScatter[T]},
		{"alltoall", checkAlltoall[T]},
		{"alltoallv", checkAlltoallv[T]},
		{"gather", checkGather[T]},
		{"scatter", checkScatter[T]},
		{"gatherv", checkGatherv[T]},
		{"scatterv", checkScatterv[T]},
		{"scan/exscan", checkScan[T]},
		{"sendrecv", checkSendRecv[T]},
		{"send/recv", checkSendThenRecv[T]},
	}
}

// CheckEach is CheckAll (registered false) or CheckAllRegistered (true)
// that calls done, if not nil, after each check passed on this rank, with
// its name (see Checks) and how long it took: a long run (hundreds of
// ranks) can show its progress.
func CheckEach[T Number](ctx context.Context, c *Comm, count int, ops []Op, registered bool, done func(check string, took time.Duration)) error {
	for _, ch := range checksOf[T]() {
		start := time.Now()
		k := &checker[T]{c: c, n: c.Size(), me: c.Rank(), count: count, ops: ops, registered: registered}
		err := ch.run(ctx, k)
		err = errors.Join(err, k.release())
		if err != nil {
			return fmt.Errorf("commtest: check %s (%s): %w", ch.name, k.what(), err)
		}
		if done != nil {
			done(ch.name, time.Since(start))
		}
	}
	return c.Barrier(ctx)
}

func checkAll[T Number](ctx context.Context, c *Comm, count int, ops []Op, registered bool) error {
	return CheckEach[T](ctx, c, count, ops, registered, nil)
}

// checker is what a check works with: the communicator, the count and
// operations, and its buffers, plain or registered.
type checker[T Number] struct {
	c          *Comm
	n, me      int
	count      int
	ops        []Op
	registered bool
	allocated  [][]T // from Alloc, freed by release
}

// what describes the check's arguments for its errors.
func (k *checker[T]) what() string {
	bufs := "plain buffers"
	if k.registered {
		bufs = "registered buffers"
	}
	return fmt.Sprintf("%s, count %d, %s", TypeOf[T](), k.count, bufs)
}

// buf returns a zeroed buffer of n elements: a plain slice, or one from
// Alloc that release frees.
func (k *checker[T]) buf(n int) ([]T, error) {
	if !k.registered {
		return make([]T, n), nil
	}
	b, err := Alloc[T](k.c, n)
	if err != nil {
		return nil, err
	}
	k.allocated = append(k.allocated, b)
	return b, nil
}

// bufs returns zeroed buffers of the given lengths (see buf).
func (k *checker[T]) bufs(ns ...int) ([][]T, error) {
	out := make([][]T, len(ns))
	for i, n := range ns {
		var err error
		if out[i], err = k.buf(n); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (k *checker[T]) release() error {
	var errs []error
	for _, b := range k.allocated {
		errs = append(errs, Free(k.c, b))
	}
	k.allocated = nil
	return errors.Join(errs...)
}

func total(xs []int) int {
	t := 0
	for _, x := range xs {
		t += x
	}
	return t
}

// AllOps is every arithmetic reduction operation, for every type.
var AllOps = []Op{Sum, Prod, Min, Max, Avg}

// BitwiseOps are the bitwise operations, for the integer types only.
var BitwiseOps = []Op{BAnd, BOr, BXor}
