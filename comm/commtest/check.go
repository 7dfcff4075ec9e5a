// Package commtest holds checks that run goccl's collectives on a
// communicator and verify every result against an independent reference
// (small-integer inputs, reductions computed in float64 with gonum), for
// the comm package's tests and for programs that check a real job (the
// collcheck example, the Soft-RoCE run). It imports comm, transport/mem,
// transport/tcp, gonum and the standard library.
package commtest

import (
	"context"
	"fmt"
	"math"

	"gonum.org/v1/gonum/floats"

	. "github.com/goccl/goccl/comm"
)

// value is rank r's element i: small integers, so every reduction is exact
// in every type (8-bit types included) and results compare bitwise.
func value(op Op, r, i int) float64 {
	if op == Prod {
		return []float64{1, -1, 1, 1, -1}[(r+2*i)%5]
	}
	return float64((r*7+i*3)%9 - 4)
}

func unsigned[T Number]() bool { var z T; return z-1 > 0 }

func inputs[T Number](op Op, r, n int) []T {
	out := make([]T, n)
	for i := range out {
		v := value(op, r, i)
		if unsigned[T]() {
			v = math.Abs(v)
		}
		out[i] = T(v)
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
	case Sum:
		return T(floats.Sum(vals))
	case Prod:
		return T(floats.Prod(vals))
	case Min:
		return T(floats.Min(vals))
	case Max:
		return T(floats.Max(vals))
	case Avg:
		s := floats.Sum(vals)
		switch TypeOf[T]() {
		case TypeFloat32, TypeFloat64:
			return T(s) / T(n)
		}
		return T(math.Trunc(s / float64(n)))
	}
	panic("op")
}

func algosOf(coll string) []string { return append(Algorithms(coll), "") }

func withAlgo(a string) []CallOption {
	if a == "" {
		return nil // the selector's choice
	}
	return []CallOption{WithAlgorithm(a)}
}

// CheckAll runs every collective with every algorithm (forced, then the
// selector's choice) on count elements (or blocks of count) of type T and
// checks each result; reductions use ops. Every rank of c must call it with
// the same arguments.
func CheckAll[T Number](ctx context.Context, c *Comm, count int, ops []Op) error {
	n, me := c.Size(), c.Rank()
	tname := TypeOf[T]().String()
	fail := func(coll, algo string, format string, args ...any) error {
		return fmt.Errorf("%s[%s](%s, count %d): %s", coll, algo, tname, count, fmt.Sprintf(format, args...))
	}
	for _, algo := range algosOf("allreduce") {
		for _, op := range ops {
			send := inputs[T](op, me, count)
			recv := make([]T, count)
			if err := Allreduce(ctx, c, send, recv, op, withAlgo(algo)...); err != nil {
				return err
			}
			for i, v := range recv {
				if w := want[T](op, n, i); v != w {
					return fail("allreduce", algo, "%s: element %d = %v, want %v", op, i, v, w)
				}
			}
		}
	}
	for _, op := range ops {
		for _, root := range []int{0, n - 1} {
			send := inputs[T](op, me, count)
			var recv []T
			if me == root {
				recv = make([]T, count)
			}
			if err := Reduce(ctx, c, send, recv, op, root); err != nil {
				return err
			}
			for i, v := range recv {
				if w := want[T](op, n, i); v != w {
					return fail("reduce", "binomial", "%s root %d: element %d = %v, want %v", op, root, i, v, w)
				}
			}
			orig := inputs[T](op, me, count)
			for i, v := range send {
				if v != orig[i] {
					return fail("reduce", "binomial", "send buffer modified")
				}
			}
		}
	}
	for _, algo := range algosOf("broadcast") {
		for _, root := range []int{0, n / 2} {
			buf := inputs[T](Sum, me, count)
			if err := Broadcast(ctx, c, buf, root, withAlgo(algo)...); err != nil {
				return err
			}
			rootIn := inputs[T](Sum, root, count)
			for i, v := range buf {
				if w := rootIn[i]; v != w {
					return fail("broadcast", algo, "root %d: element %d = %v, want %v", root, i, v, w)
				}
			}
		}
	}
	for _, algo := range algosOf("allgather") {
		send := inputs[T](Sum, me, count)
		recv := make([]T, n*count)
		if err := Allgather(ctx, c, send, recv, withAlgo(algo)...); err != nil {
			return err
		}
		for j := range n {
			for i, w := range inputs[T](Sum, j, count) {
				if v := recv[j*count+i]; v != w {
					return fail("allgather", algo, "block %d element %d = %v, want %v", j, i, v, w)
				}
			}
		}
	}
	{
		counts := make([]int, n)
		for j := range n {
			counts[j] = (count + 3*j) % (count + 2)
		}
		send := inputs[T](Sum, me, counts[me])
		recv := make([]T, total(counts)+1)
		if err := Allgatherv(ctx, c, send, recv, counts, nil); err != nil {
			return err
		}
		off := 0
		for j := range n {
			for i, w := range inputs[T](Sum, j, counts[j]) {
				if v := recv[off+i]; v != w {
					return fail("allgatherv", "ring", "block %d element %d = %v, want %v", j, i, v, w)
				}
			}
			off += counts[j]
		}
	}
	for _, algo := range algosOf("reduce-scatter") {
		for _, op := range ops {
			send := inputs[T](op, me, n*count)
			recv := make([]T, count)
			if err := ReduceScatter(ctx, c, send, recv, op, withAlgo(algo)...); err != nil {
				return err
			}
			for i, v := range recv {
				if w := want[T](op, n, me*count+i); v != w {
					return fail("reduce-scatter", algo, "%s: element %d = %v, want %v", op, i, v, w)
				}
			}
		}
	}
	// Block j of rank r's all-to-all input, element i: r*1000+j*10+i%10.
	a2a := func(r, j, i int) T { return T((r*31+j*7+i)%100 + 1) }
	for _, algo := range algosOf("alltoall") {
		send := make([]T, n*count)
		for j := range n {
			for i := range count {
				send[j*count+i] = a2a(me, j, i)
			}
		}
		recv := make([]T, n*count)
		if err := Alltoall(ctx, c, send, recv, withAlgo(algo)...); err != nil {
			return err
		}
		for j := range n {
			for i := range count {
				if v, w := recv[j*count+i], a2a(j, me, i); v != w {
					return fail("alltoall", algo, "block %d element %d = %v, want %v", j, i, v, w)
				}
			}
		}
	}
	{
		// Rank r sends (r+j)%3*count/2+ (r==j) elements to rank j.
		cnt := func(from, to int) int { return (from+to)%3*count/2 + from%2 }
		sc, rc := make([]int, n), make([]int, n)
		for j := range n {
			sc[j], rc[j] = cnt(me, j), cnt(j, me)
		}
		send := make([]T, total(sc))
		off := 0
		for j := range n {
			for i := range sc[j] {
				send[off+i] = a2a(me, j, i)
			}
			off += sc[j]
		}
		recv := make([]T, total(rc))
		if err := Alltoallv(ctx, c, send, sc, nil, recv, rc, nil); err != nil {
			return err
		}
		off = 0
		for j := range n {
			for i := range rc[j] {
				if v, w := recv[off+i], a2a(j, me, i); v != w {
					return fail("alltoallv", "pairwise", "block %d element %d = %v, want %v", j, i, v, w)
				}
			}
			off += rc[j]
		}
	}
	for _, root := range []int{0, n - 1} {
		send := inputs[T](Sum, me, count)
		var recv []T
		if me == root {
			recv = make([]T, n*count)
		}
		if err := Gather(ctx, c, send, recv, root); err != nil {
			return err
		}
		if me == root {
			for j := range n {
				for i, w := range inputs[T](Sum, j, count) {
					if v := recv[j*count+i]; v != w {
						return fail("gather", "binomial", "root %d block %d element %d = %v, want %v", root, j, i, v, w)
					}
				}
			}
		}
		var all []T
		if me == root {
			all = make([]T, n*count)
			for j := range n {
				copy(all[j*count:], inputs[T](Prod, j, count))
			}
		}
		mine := make([]T, count)
		if err := Scatter(ctx, c, all, mine, root); err != nil {
			return err
		}
		for i, w := range inputs[T](Prod, me, count) {
			if mine[i] != w {
				return fail("scatter", "binomial", "root %d element %d = %v, want %v", root, i, mine[i], w)
			}
		}
	}
	if n > 1 {
		// A ring exchange, then a send/recv pair between neighbours.
		right, left := (me+1)%n, (me+n-1)%n
		recv := make([]T, count)
		if err := SendRecv(ctx, c, inputs[T](Sum, me, count), right, recv, left, 7); err != nil {
			return err
		}
		for i, w := range inputs[T](Sum, left, count) {
			if recv[i] != w {
				return fail("sendrecv", "direct", "element %d = %v, want %v", i, recv[i], w)
			}
		}
		if me%2 == 0 && me+1 < n {
			if err := Send(ctx, c, inputs[T](Max, me, count), me+1, 3); err != nil {
				return err
			}
		} else if me%2 == 1 {
			buf := make([]T, count)
			if err := Recv(ctx, c, buf, me-1, 3); err != nil {
				return err
			}
			for i, w := range inputs[T](Max, me-1, count) {
				if buf[i] != w {
					return fail("recv", "direct", "element %d = %v, want %v", i, buf[i], w)
				}
			}
		}
	}
	return c.Barrier(ctx)
}

func total(xs []int) int {
	t := 0
	for _, x := range xs {
		t += x
	}
	return t
}

// AllOps is every reduction operation.
var AllOps = []Op{Sum, Prod, Min, Max, Avg}
