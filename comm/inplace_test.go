package comm_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	. "github.com/goccl/goccl/comm"
)

// bufOf returns a buffer of n elements: from Alloc (registered) or make.
func bufOf(c *Comm, n int, registered bool) ([]int32, func(), error) {
	if !registered {
		return make([]int32, n), func() {}, nil
	}
	b, err := Alloc[int32](c, n)
	return b, func() { Free(c, b) }, err
}

// val is what rank r puts at element i of block j.
func val(r, j, i int) int32 { return int32(r*1000 + j*10 + i) }

// TestInPlace runs every collective that has an in-place form (issue 11
// item 14a: MPI_IN_PLACE) in place, on plain and registered buffers, and
// checks the results; overlaps that are not the in-place form are refused.
func TestInPlace(t *testing.T) {
	const n, k, root = 3, 5, 1
	runRanks(t, n, testOpts, func(c *Comm) error {
		ctx := context.Background()
		me := c.Rank()
		for _, reg := range []bool{false, true} {
			fail := func(coll, format string, args ...any) error {
				return fmt.Errorf("%s in place (registered %v): %s", coll, reg, fmt.Sprintf(format, args...))
			}
			buf, free, err := bufOf(c, n*k, reg)
			if err != nil {
				return err
			}
			defer free()
			fill := func(f func(j, i int) int32) {
				for j := range n {
					for i := range k {
						buf[j*k+i] = f(j, i)
					}
				}
			}

			// reduce-scatter: recv is this rank's block of send.
			fill(func(j, i int) int32 { return val(me, j, i) })
			if err := ReduceScatter(ctx, c, buf, buf[me*k:(me+1)*k], Sum); err != nil {
				return err
			}
			for i := range k {
				want := int32(0)
				for r := range n {
					want += val(r, me, i)
				}
				if got := buf[me*k+i]; got != want {
					return fail("reduce-scatter", "element %d = %d, want %d", i, got, want)
				}
			}

			// gather: root's send is its block of recv.
			fill(func(j, i int) int32 { return -1 })
			for i := range k {
				buf[me*k+i] = val(me, 0, i)
			}
			if err := Gather(ctx, c, buf[me*k:(me+1)*k], buf, root); err != nil {
				return err
			}
			if me == root {
				for j := range n {
					for i := range k {
						if got := buf[j*k+i]; got != val(j, 0, i) {
							return fail("gather", "block %d element %d = %d, want %d", j, i, got, val(j, 0, i))
						}
					}
				}
			}

			// scatter: root's recv is its block of send.
			fill(func(j, i int) int32 { return val(me, j, i) })
			if err := Scatter(ctx, c, buf, buf[me*k:(me+1)*k], root); err != nil {
				return err
			}
			for j := range n {
				for i := range k {
					want := val(me, j, i) // untouched
					if j == me {
						want = val(root, me, i)
					}
					if got := buf[j*k+i]; got != want {
						return fail("scatter", "block %d element %d = %d, want %d", j, i, got, want)
					}
				}
			}

			// alltoall: send is recv.
			fill(func(j, i int) int32 { return val(me, j, i) })
			if err := Alltoall(ctx, c, buf, buf); err != nil {
				return err
			}
			for j := range n {
				for i := range k {
					if got := buf[j*k+i]; got != val(j, me, i) {
						return fail("alltoall", "block %d element %d = %d, want %d", j, i, got, val(j, me, i))
					}
				}
			}

			// alltoallv: send is recv; rank i sends 1+(i+j)%3 elements to j.
			counts := make([]int, n)
			for j := range n {
				counts[j] = 1 + (me+j)%3
			}
			fill(func(j, i int) int32 { return -1 })
			pos := 0
			for j := range n {
				for i := range counts[j] {
					buf[pos+i] = val(me, j, i)
				}
				pos += counts[j]
			}
			if err := Alltoallv(ctx, c, buf, counts, nil, buf, counts, nil); err != nil {
				return err
			}
			pos = 0
			for j := range n {
				for i := range counts[j] {
					if got := buf[pos+i]; got != val(j, me, i) {
						return fail("alltoallv", "block %d element %d = %d, want %d", j, i, got, val(j, me, i))
					}
				}
				pos += counts[j]
			}

			// allgatherv: send is this rank's block of recv.
			vc, vd := []int{2, 3, 1}, []int{0, 4, 10}
			fill(func(j, i int) int32 { return -1 })
			for i := range vc[me] {
				buf[vd[me]+i] = val(me, 0, i)
			}
			if err := Allgatherv(ctx, c, buf[vd[me]:vd[me]+vc[me]], buf[:12], vc, vd); err != nil {
				return err
			}
			for j := range n {
				for i := range vc[j] {
					if got := buf[vd[j]+i]; got != val(j, 0, i) {
						return fail("allgatherv", "block %d element %d = %d, want %d", j, i, got, val(j, 0, i))
					}
				}
			}

			// allgather and reduce, which had in-place forms already.
			fill(func(j, i int) int32 { return -1 })
			for i := range k {
				buf[me*k+i] = val(me, 0, i)
			}
			if err := Allgather(ctx, c, buf[me*k:(me+1)*k], buf); err != nil {
				return err
			}
			for j := range n {
				if got := buf[j*k]; got != val(j, 0, 0) {
					return fail("allgather", "block %d = %d, want %d", j, got, val(j, 0, 0))
				}
			}
			fill(func(j, i int) int32 { return int32(me + j) })
			if err := Reduce(ctx, c, buf, buf, Sum, root); err != nil {
				return err
			}
			if me == root && buf[k] != 3+3 {
				return fail("reduce", "element %d = %d, want 6", k, buf[k])
			}

		}
		return nil
	})
	// Overlaps that are not the in-place form are refused (and a refused
	// call breaks the communicator: one job each).
	for name, call := range map[string]func(ctx context.Context, c *Comm, buf []int32) error{
		"alltoall": func(ctx context.Context, c *Comm, buf []int32) error { return Alltoall(ctx, c, buf[:n*k-n], buf[n:]) },
		"alltoallv": func(ctx context.Context, c *Comm, buf []int32) error {
			return Alltoallv(ctx, c, buf[:6], []int{2, 2, 2}, nil, buf[1:7], []int{2, 2, 2}, nil)
		},
		"scatter": func(ctx context.Context, c *Comm, buf []int32) error {
			me := c.Rank()
			return Scatter(ctx, c, buf[:n*2], buf[(me+1)%n*2:(me+1)%n*2+2], me)
		},
	} {
		runRanks(t, n, testOpts, func(c *Comm) error {
			if err := call(context.Background(), c, make([]int32, n*k)); err == nil || !strings.Contains(err.Error(), "overlap") {
				return fmt.Errorf("%s with overlapping buffers: %v, want an error", name, err)
			}
			return nil
		})
	}
}

// TestVGapsUntouched checks that allgatherv and alltoallv leave the
// elements of recv between the blocks alone, on plain and registered
// buffers, also after an earlier collective left other bytes in the
// staging buffers (issue 11 item 5: the leftovers were copied into the
// gaps).
func TestVGapsUntouched(t *testing.T) {
	const n, sentinel = 3, -7
	runRanks(t, n, testOpts, func(c *Comm) error {
		ctx := context.Background()
		me := c.Rank()
		for _, reg := range []bool{false, true} {
			// Leave other bytes in the staging buffers.
			dirty := make([]int32, 64*n)
			for i := range dirty {
				dirty[i] = 999
			}
			if err := Allgather(ctx, c, dirty[me*64:(me+1)*64], dirty); err != nil {
				return err
			}
			if err := Alltoall(ctx, c, slices.Clone(dirty), dirty); err != nil {
				return err
			}

			counts, displs := []int{2, 3, 1}, []int{1, 5, 10}
			recv, free, err := bufOf(c, 13, reg)
			if err != nil {
				return err
			}
			defer free()
			for i := range recv {
				recv[i] = sentinel
			}
			send := make([]int32, counts[me])
			for i := range send {
				send[i] = val(me, 0, i)
			}
			if err := Allgatherv(ctx, c, send, recv, counts, displs); err != nil {
				return err
			}
			want := make([]int32, 13)
			for i := range want {
				want[i] = sentinel
			}
			for j := range n {
				for i := range counts[j] {
					want[displs[j]+i] = val(j, 0, i)
				}
			}
			if !slices.Equal(recv, want) {
				return fmt.Errorf("allgatherv (registered %v): recv %v, want %v", reg, recv, want)
			}

			// alltoallv: rank i sends 1+(i+j)%3 elements to j; recv keeps
			// two elements free before every block and one at the end.
			sc, rc, rd := make([]int, n), make([]int, n), make([]int, n)
			var sendv []int32
			pos := 0
			for j := range n {
				sc[j], rc[j] = 1+(me+j)%3, 1+(j+me)%3
				for i := range sc[j] {
					sendv = append(sendv, val(me, j, i))
				}
				rd[j] = pos + 2
				pos = rd[j] + rc[j]
			}
			recv2, free2, err := bufOf(c, pos+1, reg)
			if err != nil {
				return err
			}
			defer free2()
			for i := range recv2 {
				recv2[i] = sentinel
			}
			if err := Alltoallv(ctx, c, sendv, sc, nil, recv2, rc, rd); err != nil {
				return err
			}
			want2 := make([]int32, pos+1)
			for i := range want2 {
				want2[i] = sentinel
			}
			for j := range n {
				for i := range rc[j] {
					want2[rd[j]+i] = val(j, me, i)
				}
			}
			if !slices.Equal(recv2, want2) {
				return fmt.Errorf("alltoallv (registered %v): recv %v, want %v", reg, recv2, want2)
			}
		}
		return nil
	})
}

// TestPartialOverlapsRefused passes send and recv that overlap other than
// in the in-place form to every collective with two buffers, small (the
// shared-memory board's quick way) and large, and wants every rank's call
// refused with an error that says so (in a rooted call, the root's; the
// others' may end before they hear of it, as Options.StrictChecks says).
// Before, allreduce, reduce,
// allgather(v), reduce-scatter and gather took them: an allreduce of 1 Mi
// float32 over shared memory with recv 1000 elements past send returned
// no error and 717,331 wrong elements (a newcomer's report).
func TestPartialOverlapsRefused(t *testing.T) {
	const n = 3
	cases := map[string]func(ctx context.Context, c *Comm, buf []float32, k int) error{
		"allreduce": func(ctx context.Context, c *Comm, buf []float32, k int) error {
			return Allreduce(ctx, c, buf[:k], buf[k/2:k/2+k], Sum)
		},
		"allreduce-async": func(ctx context.Context, c *Comm, buf []float32, k int) error {
			return AllreduceAsync(c, buf[k/2:k/2+k], buf[:k], Max).Wait(ctx)
		},
		"persistent allreduce": func(ctx context.Context, c *Comm, buf []float32, k int) error {
			_, err := AllreduceInit(c, buf[:k], buf[1:k+1], Sum)
			return err
		},
		"reduce": func(ctx context.Context, c *Comm, buf []float32, k int) error {
			return Reduce(ctx, c, buf[:k], buf[1:k+1], Sum, 0) // refused by the root
		},
		"allgather": func(ctx context.Context, c *Comm, buf []float32, k int) error {
			// send overlaps recv but is not this rank's block
			at := ((c.Rank()+1)%n)*k + 1
			return Allgather(ctx, c, buf[at:at+k], buf[:n*k])
		},
		"allgatherv": func(ctx context.Context, c *Comm, buf []float32, k int) error {
			return Allgatherv(ctx, c, buf[1:k+1], buf[:n*k], []int{k, k, k}, nil)
		},
		"reduce-scatter": func(ctx context.Context, c *Comm, buf []float32, k int) error {
			return ReduceScatter(ctx, c, buf[:n*k], buf[n*k-k/2:n*k-k/2+k], Sum)
		},
		"reduce-scatter into another rank's block": func(ctx context.Context, c *Comm, buf []float32, k int) error {
			o := (c.Rank() + 1) % n
			return ReduceScatter(ctx, c, buf[:n*k], buf[o*k:(o+1)*k], Sum)
		},
		"gather": func(ctx context.Context, c *Comm, buf []float32, k int) error {
			return Gather(ctx, c, buf[2:k+2], buf[:n*k], 0) // refused by the root
		},
		"scatter": func(ctx context.Context, c *Comm, buf []float32, k int) error {
			return Scatter(ctx, c, buf[:n*k], buf[3:k+3], 0) // refused by the root
		},
		"alltoall": func(ctx context.Context, c *Comm, buf []float32, k int) error {
			return Alltoall(ctx, c, buf[:n*k], buf[n:n*k+n])
		},
	}
	for _, kind := range []string{"mem", "tcp", "shm"} {
		for _, k := range []int{6, 1 << 16} {
			for name, call := range cases {
				t.Run(fmt.Sprintf("%s/%s/%d", kind, name, k), func(t *testing.T) {
					rooted := name == "reduce" || name == "gather" || name == "scatter"
					if rooted {
						// The senders, setting up their first link to
						// the root, learn of its refusal after the set-up's
						// grace (notifyWait, 0.3 s): these cases run side
						// by side.
						sideBySide(t)
					}
					runRanksOn(t, kind, n, testOpts, func(c *Comm) error {
						buf := make([]float32, (n+1)*k)
						err := call(context.Background(), c, buf, k)
						if rooted && c.Rank() != 0 && err == nil {
							// A rank that only sends may return before
							// it hears of the root's refusal (Options.
							// StrictChecks): its next call fails.
							err = c.Barrier(context.Background())
						}
						if err == nil || !strings.Contains(err.Error(), "overlap") {
							return fmt.Errorf("%s of %d elements with partly overlapping buffers: %v, want an error about the overlap", name, k, err)
						}
						return nil
					})
				})
			}
		}
	}
}

// TestVEmptyBlockDisplacementIgnored: an empty block's displacement is
// not looked at, as in MPI (past the buffer's end, or negative). It was
// refused: "recv block of rank 1 (0 elements at 1000) outside a buffer of
// 6 elements".
func TestVEmptyBlockDisplacementIgnored(t *testing.T) {
	const n = 3
	runRanks(t, n, testOpts, func(c *Comm) error {
		ctx := context.Background()
		me := c.Rank()
		counts, displs := []int{2, 0, 4}, []int{0, 1000, 2}
		send := make([]int32, counts[me])
		for i := range send {
			send[i] = int32(10*me + i)
		}
		recv := make([]int32, 6)
		if err := Allgatherv(ctx, c, send, recv, counts, displs); err != nil {
			return err
		}
		if want := []int32{0, 1, 20, 21, 22, 23}; !slices.Equal(recv, want) {
			return fmt.Errorf("allgatherv: %v, want %v", recv, want)
		}
		// All-to-all-v: rank 1 sends and receives nothing; its blocks'
		// displacements are anything.
		sc, sd := []int{1, 0, 1}, []int{0, -5, 1}
		if me == 1 {
			sc, sd = []int{0, 0, 0}, []int{7, -1, 99}
		}
		rc, rd := []int{1, 0, 1}, []int{0, 1 << 40, 1}
		if me == 1 {
			rc, rd = []int{0, 0, 0}, []int{-3, 5, 8}
		}
		sendv := []int32{int32(100*me + 1), int32(100*me + 2)}
		recvv := make([]int32, 2)
		if err := Alltoallv(ctx, c, sendv, sc, sd, recvv, rc, rd); err != nil {
			return err
		}
		if me != 1 {
			want := []int32{int32(1 + me/2), int32(201 + me/2)}
			if !slices.Equal(recvv, want) {
				return fmt.Errorf("rank %d alltoallv: %v, want %v", me, recvv, want)
			}
		}
		return nil
	})
}
