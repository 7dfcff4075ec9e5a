// Command allreduce is goccl's smallest real program: each rank fills a
// buffer from its rank, allreduces it (sum) and checks every element of the
// result against the exact expected value, then prints it.
//
// Run it under gorun:
//
//	gorun -n 4 ./allreduce -count 16777216
//
// Flags:
//
//	-count N     elements per rank (default 1048576); 0 is allowed
//	-type T      float32, float64, int32 or int64 (default float32)
//	-iters N     timed allreduce calls after one warm-up (default 5)
//	-registered  allreduce on a registered buffer (comm.Alloc) instead of
//	             a plain Go slice that goes through the staging buffer
//	-v           print each rank's pid once it has joined
//	-stats       print each rank's Init time, connected peers, memory
//	             (VmRSS, VmHWM, VmSize) and open descriptors at the end
//
// Element i on rank r is (r+1)*(i%7+1), so after the sum every element i
// is (i%7+1)*n(n+1)/2 exactly, in every type, for any rank count n below
// a few thousand. The example exits non-zero if any element differs.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/examples/internal/rankstats"

	"golang.org/x/sys/unix"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("allreduce", flag.ContinueOnError)
	fs.SetOutput(stderr)
	count := fs.Int("count", 1<<20, "elements per rank")
	typ := fs.String("type", "float32", "element type: float32, float64, int32, int64")
	iters := fs.Int("iters", 5, "timed iterations after one warm-up")
	registered := fs.Bool("registered", false, "use a registered buffer (comm.Alloc)")
	verbose := fs.Bool("v", false, "print each rank's pid once it has joined")
	stats := fs.Bool("stats", false, "print each rank's Init time, peers, memory and descriptors at the end")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *count < 0 || *iters < 0 || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "allreduce: -count and -iters must be >= 0 and no arguments are taken")
		return 2
	}
	size := 4
	switch *typ {
	case "float32", "int32":
	case "float64", "int64":
		size = 8
	default:
		// Before Init: a usage error should not wait for the other ranks.
		fmt.Fprintf(stderr, "allreduce: unknown -type %q (want float32, float64, int32 or int64)\n", *typ)
		return 2
	}
	// So is a buffer this host cannot hold (make would end the program
	// with the runtime's out-of-memory crash).
	if mem := hostMemory(); mem > 0 && uint64(*count) > mem/uint64(size) {
		fmt.Fprintf(stderr, "allreduce: -count %d of %s is more than this host's %d bytes of memory\n", *count, *typ, mem)
		return 2
	}
	start := time.Now()
	c, err := comm.Init(ctx, comm.Options{})
	if err != nil {
		fmt.Fprintln(stderr, "allreduce:", err)
		return 1
	}
	defer c.Close()
	initTime := time.Since(start)
	if *verbose {
		fmt.Fprintf(stdout, "rank %d pid %d joined\n", c.Rank(), os.Getpid())
	}
	switch *typ {
	case "float32":
		err = runTyped[float32](ctx, c, *count, *iters, *registered, stdout)
	case "float64":
		err = runTyped[float64](ctx, c, *count, *iters, *registered, stdout)
	case "int32":
		err = runTyped[int32](ctx, c, *count, *iters, *registered, stdout)
	case "int64":
		err = runTyped[int64](ctx, c, *count, *iters, *registered, stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "allreduce:", err)
		return 1
	}
	if *stats {
		fmt.Fprintln(stdout, rankstats.Line(c.Rank(), initTime, c.ConnectedPeers(), c.PeakPeers()))
	}
	return 0
}

func runTyped[T comm.Number](ctx context.Context, c *comm.Comm, count, iters int, registered bool, stdout io.Writer) error {
	var buf []T
	if registered {
		var err error
		if buf, err = comm.Alloc[T](c, count); err != nil {
			return err
		}
		defer comm.Free(c, buf)
	} else {
		buf = make([]T, count)
	}
	r := c.Rank()
	n := c.Size()
	fill := func() {
		for i := range buf {
			buf[i] = T((r + 1) * (i%7 + 1))
		}
	}
	fill()
	if err := comm.Allreduce(ctx, c, buf, buf, comm.Sum); err != nil {
		return err
	}
	if err := check(buf, n); err != nil {
		return fmt.Errorf("rank %d: warm-up: %w", r, err)
	}
	var total time.Duration
	for range iters {
		fill()
		start := time.Now()
		if err := comm.Allreduce(ctx, c, buf, buf, comm.Sum); err != nil {
			return err
		}
		total += time.Since(start)
		if err := check(buf, n); err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
	}
	if r == 0 {
		var z T
		bytes := count * int(sizeOf(z))
		per := time.Duration(0)
		if iters > 0 {
			per = total / time.Duration(iters)
		}
		busbw := 0.0
		if per > 0 && n > 1 {
			busbw = float64(bytes) / per.Seconds() / 1e9 * 2 * float64(n-1) / float64(n)
		}
		sample := "no elements"
		if count > 0 {
			sample = fmt.Sprintf("element[0] = %v, element[%d] = %v", buf[0], count-1, buf[count-1])
		}
		ranks := "ranks"
		if n == 1 {
			ranks = "rank"
		}
		fmt.Fprintf(stdout, "allreduce(sum) of %d %T (%d bytes) over %d %s via %s: verified on every rank (%s); %v per call, busbw %.2f GB/s\n",
			count, z, bytes, n, ranks, transports(c), sample, per, busbw)
	}
	return nil
}

// transports names the transport, and when peers are reached by different
// ones, which reaches which: "tcp+shm (from rank 0: shm: ranks 1-3; tcp:
// ranks 4-7)".
func transports(c *comm.Comm) string {
	if !strings.Contains(c.Transport(), "+") {
		return c.Transport()
	}
	return fmt.Sprintf("%s (from rank %d: %s)", c.Transport(), c.Rank(), c.Transports())
}

func sizeOf[T comm.Number](T) uintptr {
	var z T
	switch any(z).(type) {
	case float64, int64:
		return 8
	}
	return 4
}

// check verifies every element: element i must be (i%7+1)*n(n+1)/2.
func check[T comm.Number](buf []T, n int) error {
	tri := n * (n + 1) / 2
	for i, v := range buf {
		if want := T((i%7 + 1) * tri); v != want {
			return fmt.Errorf("element %d is %v, want %v", i, v, want)
		}
	}
	return nil
}

// hostMemory is this host's memory in bytes, 0 if unknown.
func hostMemory() uint64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return 0
	}
	return uint64(si.Totalram) * uint64(si.Unit)
}
