package osu

import (
	"fmt"
	"io"
)

// nccl-tests layout (src/common.cu): a parameter line, the ranks in use,
// a three-line column header, one row per size with an out-of-place and an
// in-place measurement, and the "# Avg bus bandwidth" footer.

// NCCLParams is the first header line of nccl-tests.
type NCCLParams struct {
	MinBytes, MaxBytes int
	Warmup, Iters      int
	Check              bool
}

// NCCLRank is one "#  Rank ..." line.
type NCCLRank struct {
	Rank int
	Pid  int
	Host string
}

func writeNCCLHeader(w io.Writer, p NCCLParams, m Meta, ranks []NCCLRank) {
	check := 0
	if p.Check {
		check = 1
	}
	fmt.Fprintf(w, "# nThread 1 nGpus 1 minBytes %d maxBytes %d step: 2(factor) warmup iters: %d iters: %d agg iters: 1 validation: %d graph: 0\n",
		p.MinBytes, p.MaxBytes, p.Warmup, p.Iters, check)
	fmt.Fprintf(w, "#\n")
	fmt.Fprintf(w, "# goccl %s  Transport: %s  Algorithm: %s  Ranks: %d  Hosts: %d\n", versionTag(m.Version), m.Transport, m.Algorithm, m.Ranks, m.Hosts)
	fmt.Fprintf(w, "# Using devices\n")
	for _, r := range ranks {
		fmt.Fprintf(w, "#  Rank %2d Group %2d Pid %6d on %10s device %2d [0x%02x] goccl %s\n", r.Rank, 0, r.Pid, r.Host, 0, 0, m.Transport)
	}
	fmt.Fprintf(w, "#\n")
	fmt.Fprintf(w, "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "", "", "", "")
	fmt.Fprintf(w, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n",
		"size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong")
	fmt.Fprintf(w, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n",
		"(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "")
}

// NCCLResult is one measurement (out-of-place or in-place). Time is in
// microseconds; Wrong < 0 means not checked.
type NCCLResult struct {
	Time         float64
	AlgBW, BusBW float64
	Wrong        int64
	Skipped      bool // the collective has no such variant
}

// NCCLRow is one size.
type NCCLRow struct {
	Bytes, Count int
	Type, Op     string
	Root         int
	Out, In      NCCLResult
}

// ncclTime formats a time as nccl-tests does: fewer decimals as it grows.
func ncclTime(us float64) string {
	switch {
	case us >= 10000:
		return fmt.Sprintf("%7.0f", us)
	case us >= 100:
		return fmt.Sprintf("%7.1f", us)
	}
	return fmt.Sprintf("%7.2f", us)
}

func writeNCCLRow(w io.Writer, r NCCLRow) {
	fmt.Fprintf(w, "%12d  %12d  %8s  %6s  %6d", r.Bytes, r.Count, r.Type, r.Op, r.Root)
	for _, x := range []NCCLResult{r.Out, r.In} {
		switch {
		case x.Skipped:
			fmt.Fprintf(w, "  %7s  %6s  %6s  %5s", "N/A", "N/A", "N/A", "N/A")
		case x.Wrong < 0:
			fmt.Fprintf(w, "  %7s  %6.2f  %6.2f  %5s", ncclTime(x.Time), x.AlgBW, x.BusBW, "N/A")
		default:
			fmt.Fprintf(w, "  %7s  %6.2f  %6.2f  %5d", ncclTime(x.Time), x.AlgBW, x.BusBW, x.Wrong)
		}
	}
	fmt.Fprintln(w)
}

// writeNCCLFooter prints the error count and the mean bus bandwidth over
// every measurement printed.
func writeNCCLFooter(w io.Writer, errors int, avgBusBW float64) {
	status := "OK"
	if errors != 0 {
		status = "FAILED"
	}
	fmt.Fprintf(w, "# Out of bounds values : %d %s\n", errors, status)
	fmt.Fprintf(w, "# Avg bus bandwidth    : %.6g \n", avgBusBW) // C's %g: 6 digits
	fmt.Fprintf(w, "#\n")
}

// busFactor is nccl-tests' ratio of bus bandwidth to algorithm bandwidth.
func busFactor(coll string, n int) float64 {
	if n <= 1 {
		return 1
	}
	switch shape(coll) {
	case "allreduce":
		return 2 * float64(n-1) / float64(n)
	case "allgather", "reduce_scatter", "alltoall", "gather", "scatter":
		return float64(n-1) / float64(n)
	}
	return 1 // bcast, reduce, sendrecv
}
