package commtest

import (
	"context"
	"fmt"

	. "github.com/goccl/goccl/comm"
)

// The checks of CheckAll, one per collective. Each takes its buffers from
// the checker (plain or registered), runs the collective with every
// algorithm it has and then the selector's choice, and compares every
// element with the reference (want, inputs).

// algoErr names the algorithm ("" is the selector's choice) in an error of
// a check.
func algoErr(algo string, err error) error {
	if algo == "" {
		algo = "selected"
	}
	return fmt.Errorf("[%s] %w", algo, err)
}

// wrongf reports a wrong element.
func wrongf(algo, format string, args ...any) error {
	return algoErr(algo, fmt.Errorf(format, args...))
}

func checkAllreduce[T Number](ctx context.Context, k *checker[T]) error {
	b, err := k.bufs(k.count, k.count)
	if err != nil {
		return err
	}
	send, recv := b[0], b[1]
	for _, algo := range algosOf("allreduce") {
		for _, op := range k.ops {
			fill(send, op, k.me)
			clear(recv)
			if err := Allreduce(ctx, k.c, send, recv, op, withAlgo(algo)...); err != nil {
				return algoErr(algo, err)
			}
			ws := wants[T](op, k.n)
			for i, v := range recv {
				if w := ws[i%period]; v != w {
					return wrongf(algo, "%s: element %d = %v, want %v", op, i, v, w)
				}
			}
		}
	}
	return nil
}

// checkScan runs Scan with the selector's choice and every operation of
// the table but Avg (no prefix reduction), and Exscan and both in place
// with the table's first operation (comm's TestScanExscan forces each
// algorithm with every operation): rank r's result
// is the reduction over ranks 0 to r (Exscan: 0 to r-1; rank 0 keeps its
// own block).
func checkScan[T Number](ctx context.Context, k *checker[T]) error {
	b, err := k.bufs(k.count, k.count)
	if err != nil {
		return err
	}
	send, recv := b[0], b[1]
	for _, excl := range []bool{false, true} {
		name, f := "scan", Scan[T]
		if excl {
			name, f = "exscan", Exscan[T]
		}
		for _, algo := range []string{""} { // the selector's choice (TestScanExscan forces each algorithm)
			for i, op := range k.ops {
				if op == Avg || (excl && i > 0) {
					continue // Exscan with the first op: the same schedules as Scan's, and the tables' time
				}
				for _, inPlace := range []bool{false, true} {
					if inPlace && i > 0 {
						continue // in place once
					}
					s := send
					fill(send, op, k.me)
					if inPlace {
						s = nil
						fill(recv, op, k.me)
					} else {
						clear(recv)
					}
					if err := f(ctx, k.c, s, recv, op, withAlgo(algo)...); err != nil {
						return algoErr(algo, fmt.Errorf("%s: %w", name, err))
					}
					ranks := k.me + 1
					if excl && k.me > 0 {
						ranks = k.me
					}
					ws := wants[T](op, ranks)
					if excl && k.me == 0 {
						ws = inputs[T](op, 0, period)
					}
					for i, v := range recv {
						if w := ws[i%period]; v != w {
							return wrongf(algo, "%s %s (in place %v): element %d = %v, want %v", name, op, inPlace, i, v, w)
						}
					}
				}
			}
		}
	}
	return nil
}

// checkReduce reduces to the first and the last rank and checks that the
// send buffer is left as it was.
func checkReduce[T Number](ctx context.Context, k *checker[T]) error {
	b, err := k.bufs(k.count, k.count)
	if err != nil {
		return err
	}
	send := b[0]
	for _, algo := range algosOf("reduce") {
		for _, op := range k.ops {
			for _, root := range []int{0, k.n - 1} {
				fill(send, op, k.me)
				var recv []T
				if k.me == root {
					recv = b[1]
					clear(recv)
				}
				if err := Reduce(ctx, k.c, send, recv, op, root, withAlgo(algo)...); err != nil {
					return algoErr(algo, err)
				}
				ws := wants[T](op, k.n)
				for i, v := range recv {
					if w := ws[i%period]; v != w {
						return wrongf(algo, "%s root %d: element %d = %v, want %v", op, root, i, v, w)
					}
				}
				for i, w := range inputs[T](op, k.me, k.count) {
					if send[i] != w {
						return wrongf(algo, "%s root %d: send buffer modified", op, root)
					}
				}
			}
		}
	}
	return nil
}

func checkBroadcast[T Number](ctx context.Context, k *checker[T]) error {
	buf, err := k.buf(k.count)
	if err != nil {
		return err
	}
	for _, algo := range algosOf("broadcast") {
		for _, root := range []int{0, k.n / 2} {
			fill(buf, Sum, k.me)
			if err := Broadcast(ctx, k.c, buf, root, withAlgo(algo)...); err != nil {
				return algoErr(algo, err)
			}
			for i, w := range inputs[T](Sum, root, k.count) {
				if v := buf[i]; v != w {
					return wrongf(algo, "root %d: element %d = %v, want %v", root, i, v, w)
				}
			}
		}
	}
	return nil
}

// blocks checks that recv holds every rank's input for op, block j of
// counts[j] elements after the blocks before it.
func blocks[T Number](algo string, recv []T, op Op, counts []int) error {
	off := 0
	for j, cnt := range counts {
		for i, w := range inputs[T](op, j, cnt) {
			if v := recv[off+i]; v != w {
				return wrongf(algo, "block %d element %d = %v, want %v", j, i, v, w)
			}
		}
		off += cnt
	}
	return nil
}

// same is n counts of count.
func same(n, count int) []int {
	counts := make([]int, n)
	for j := range counts {
		counts[j] = count
	}
	return counts
}

func checkAllgather[T Number](ctx context.Context, k *checker[T]) error {
	b, err := k.bufs(k.count, k.n*k.count)
	if err != nil {
		return err
	}
	send, recv := b[0], b[1]
	fill(send, Sum, k.me)
	for _, algo := range algosOf("allgather") {
		clear(recv)
		if err := Allgather(ctx, k.c, send, recv, withAlgo(algo)...); err != nil {
			return algoErr(algo, err)
		}
		if err := blocks(algo, recv, Sum, same(k.n, k.count)); err != nil {
			return err
		}
	}
	return nil
}

// checkAllgatherv gathers blocks of different lengths (some empty) into a
// buffer one element longer than they need.
func checkAllgatherv[T Number](ctx context.Context, k *checker[T]) error {
	counts := make([]int, k.n)
	for j := range counts {
		counts[j] = (k.count + 3*j) % (k.count + 2)
	}
	b, err := k.bufs(counts[k.me], total(counts)+1)
	if err != nil {
		return err
	}
	send, recv := b[0], b[1]
	fill(send, Sum, k.me)
	for _, algo := range algosOf("allgatherv") {
		clear(recv)
		if err := Allgatherv(ctx, k.c, send, recv, counts, nil, withAlgo(algo)...); err != nil {
			return algoErr(algo, err)
		}
		if err := blocks(algo, recv, Sum, counts); err != nil {
			return err
		}
	}
	return nil
}

func checkReduceScatter[T Number](ctx context.Context, k *checker[T]) error {
	b, err := k.bufs(k.n*k.count, k.count)
	if err != nil {
		return err
	}
	send, recv := b[0], b[1]
	for _, algo := range algosOf("reduce-scatter") {
		for _, op := range k.ops {
			fill(send, op, k.me)
			clear(recv)
			if err := ReduceScatter(ctx, k.c, send, recv, op, withAlgo(algo)...); err != nil {
				return algoErr(algo, err)
			}
			ws := wants[T](op, k.n)
			for i, v := range recv {
				if w := ws[(k.me*k.count+i)%period]; v != w {
					return wrongf(algo, "%s: element %d = %v, want %v", op, i, v, w)
				}
			}
		}
	}
	return nil
}

// a2a is element i of the block rank r sends rank j in the all-to-all
// checks.
func a2a[T Number](r, j, i int) T { return T((r*31+j*7+i)%100 + 1) }

func checkAlltoall[T Number](ctx context.Context, k *checker[T]) error {
	b, err := k.bufs(k.n*k.count, k.n*k.count)
	if err != nil {
		return err
	}
	send, recv := b[0], b[1]
	for j := range k.n {
		for i := range k.count {
			send[j*k.count+i] = a2a[T](k.me, j, i)
		}
	}
	for _, algo := range algosOf("alltoall") {
		clear(recv)
		if err := Alltoall(ctx, k.c, send, recv, withAlgo(algo)...); err != nil {
			return algoErr(algo, err)
		}
		for j := range k.n {
			for i := range k.count {
				if v, w := recv[j*k.count+i], a2a[T](j, k.me, i); v != w {
					return wrongf(algo, "block %d element %d = %v, want %v", j, i, v, w)
				}
			}
		}
	}
	return nil
}

// checkAlltoallv exchanges blocks whose lengths depend on both ranks (some
// empty).
func checkAlltoallv[T Number](ctx context.Context, k *checker[T]) error {
	cnt := func(from, to int) int { return (from+to)%3*k.count/2 + from%2 }
	sc, rc := make([]int, k.n), make([]int, k.n)
	for j := range k.n {
		sc[j], rc[j] = cnt(k.me, j), cnt(j, k.me)
	}
	b, err := k.bufs(total(sc), total(rc))
	if err != nil {
		return err
	}
	send, recv := b[0], b[1]
	off := 0
	for j := range k.n {
		for i := range sc[j] {
			send[off+i] = a2a[T](k.me, j, i)
		}
		off += sc[j]
	}
	for _, algo := range algosOf("alltoallv") {
		clear(recv)
		if err := Alltoallv(ctx, k.c, send, sc, nil, recv, rc, nil, withAlgo(algo)...); err != nil {
			return algoErr(algo, err)
		}
		off = 0
		for j := range k.n {
			for i := range rc[j] {
				if v, w := recv[off+i], a2a[T](j, k.me, i); v != w {
					return wrongf(algo, "block %d element %d = %v, want %v", j, i, v, w)
				}
			}
			off += rc[j]
		}
	}
	return nil
}

// checkGather gathers to the first and the last rank.
func checkGather[T Number](ctx context.Context, k *checker[T]) error {
	b, err := k.bufs(k.count, k.n*k.count)
	if err != nil {
		return err
	}
	send := b[0]
	fill(send, Sum, k.me)
	for _, algo := range algosOf("gather") {
		for _, root := range []int{0, k.n - 1} {
			var recv []T
			if k.me == root {
				recv = b[1]
				clear(recv)
			}
			if err := Gather(ctx, k.c, send, recv, root, withAlgo(algo)...); err != nil {
				return algoErr(algo, err)
			}
			if k.me == root {
				if err := blocks(algo, recv, Sum, same(k.n, k.count)); err != nil {
					return fmt.Errorf("root %d: %w", root, err)
				}
			}
		}
	}
	return nil
}

// checkScatter scatters from the first and the last rank.
func checkScatter[T Number](ctx context.Context, k *checker[T]) error {
	b, err := k.bufs(k.n*k.count, k.count)
	if err != nil {
		return err
	}
	mine := b[1]
	for _, algo := range algosOf("scatter") {
		for _, root := range []int{0, k.n - 1} {
			var all []T
			if k.me == root {
				all = b[0]
				for j := range k.n {
					fill(all[j*k.count:(j+1)*k.count], Prod, j)
				}
			}
			clear(mine)
			if err := Scatter(ctx, k.c, all, mine, root, withAlgo(algo)...); err != nil {
				return algoErr(algo, err)
			}
			for i, w := range inputs[T](Prod, k.me, k.count) {
				if mine[i] != w {
					return wrongf(algo, "root %d element %d = %v, want %v", root, i, mine[i], w)
				}
			}
		}
	}
	return nil
}

// vcounts are the block lengths of the v-collectives' checks: different
// by rank, some empty.
func vcounts(n, count int) []int {
	counts := make([]int, n)
	for j := range counts {
		counts[j] = (count + 3*j) % (count + 2)
	}
	return counts
}

// checkGatherv gathers blocks of different lengths (some empty) on the
// first and the last rank, into a buffer one element longer than they
// need (left untouched); the other ranks pass their counts the first
// time and nil the second, as MPI reads them on the root only.
func checkGatherv[T Number](ctx context.Context, k *checker[T]) error {
	counts := vcounts(k.n, k.count)
	b, err := k.bufs(counts[k.me], total(counts)+1)
	if err != nil {
		return err
	}
	send := b[0]
	fill(send, Sum, k.me)
	for _, algo := range algosOf("gatherv") {
		for _, root := range []int{0, k.n - 1} {
			var recv []T
			cs := counts
			if k.me == root {
				recv = b[1]
				clear(recv)
			} else if root != 0 {
				cs = nil
			}
			if err := Gatherv(ctx, k.c, send, recv, cs, nil, root, withAlgo(algo)...); err != nil {
				return algoErr(algo, err)
			}
			if k.me == root {
				if err := blocks(algo, recv, Sum, counts); err != nil {
					return fmt.Errorf("root %d: %w", root, err)
				}
				if v := recv[len(recv)-1]; v != 0 {
					return wrongf(algo, "root %d: the element after the blocks = %v, want it untouched (0)", root, v)
				}
			}
		}
	}
	return nil
}

// checkScatterv scatters blocks of different lengths (some empty) from
// the first and the last rank; the other ranks pass their counts the
// first time and nil the second.
func checkScatterv[T Number](ctx context.Context, k *checker[T]) error {
	counts := vcounts(k.n, k.count)
	b, err := k.bufs(total(counts), counts[k.me])
	if err != nil {
		return err
	}
	mine := b[1]
	for _, algo := range algosOf("scatterv") {
		for _, root := range []int{0, k.n - 1} {
			var all []T
			cs := counts
			if k.me == root {
				all = b[0]
				off := 0
				for j, cnt := range counts {
					fill(all[off:off+cnt], Prod, j)
					off += cnt
				}
			} else if root != 0 {
				cs = nil
			}
			clear(mine)
			if err := Scatterv(ctx, k.c, all, mine, cs, nil, root, withAlgo(algo)...); err != nil {
				return algoErr(algo, err)
			}
			for i, w := range inputs[T](Prod, k.me, counts[k.me]) {
				if mine[i] != w {
					return wrongf(algo, "root %d element %d = %v, want %v", root, i, mine[i], w)
				}
			}
		}
	}
	return nil
}

// checkSendRecv is a ring exchange: each rank sends right and receives
// from the left.
func checkSendRecv[T Number](ctx context.Context, k *checker[T]) error {
	if k.n < 2 {
		return nil
	}
	b, err := k.bufs(k.count, k.count)
	if err != nil {
		return err
	}
	send, recv := b[0], b[1]
	right, left := (k.me+1)%k.n, (k.me+k.n-1)%k.n
	fill(send, Sum, k.me)
	if err := SendRecv(ctx, k.c, send, right, recv, left, 7); err != nil {
		return algoErr("", err)
	}
	for i, w := range inputs[T](Sum, left, k.count) {
		if recv[i] != w {
			return wrongf("", "element %d = %v, want %v", i, recv[i], w)
		}
	}
	return nil
}

// checkSendThenRecv pairs neighbours: even ranks send, odd ranks receive
// (a last even rank of an odd count sits out).
func checkSendThenRecv[T Number](ctx context.Context, k *checker[T]) error {
	if k.n < 2 {
		return nil
	}
	buf, err := k.buf(k.count)
	if err != nil {
		return err
	}
	switch {
	case k.me%2 == 0 && k.me+1 < k.n:
		fill(buf, Max, k.me)
		if err := Send(ctx, k.c, buf, k.me+1, 3); err != nil {
			return algoErr("", err)
		}
	case k.me%2 == 1:
		if err := Recv(ctx, k.c, buf, k.me-1, 3); err != nil {
			return algoErr("", err)
		}
		for i, w := range inputs[T](Max, k.me-1, k.count) {
			if buf[i] != w {
				return wrongf("", "element %d = %v, want %v", i, buf[i], w)
			}
		}
	}
	return nil
}
