package osu

import (
	"fmt"
	"io"
	"strings"
)

// OSU Micro-Benchmarks 7.4 layout (c/util/osu_util.h and osu_util_mpi.c):
// sizes left-aligned in 10 columns, values right-aligned in FIELD_WIDTH (20)
// columns with FLOAT_PRECISION (2) decimals, the iteration count in 12.
const (
	sizeWidth  = 10
	fieldWidth = 20
	precision  = 2
	itersWidth = 12
)

// validation is OSU's VALIDATION_STATUS.
func validation(errors int) string {
	if errors > 0 {
		return "Fail"
	}
	return "Pass"
}

// Meta describes the run: what every header and every JSON row carries.
type Meta struct {
	Version   string // goccl version (module version or VCS revision)
	Transport string
	Algorithm string
	Ranks     int
	Hosts     int
	HostNames []string // per rank
	Date      string   // RFC 3339, UTC
	GoVersion string
}

// writeTitle prints OSU's preamble: a blank line, "# OSU goccl <title> <version>",
// then goccl's own line naming transport, algorithm and job shape.
func writeTitle(w io.Writer, title string, m Meta, blank bool) {
	if blank {
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "# OSU goccl %s %s\n", title, versionTag(m.Version))
	fmt.Fprintf(w, "# Transport: %s  Algorithm: %s  Ranks: %d  Hosts: %d\n", m.Transport, m.Algorithm, m.Ranks, m.Hosts)
}

func versionTag(v string) string {
	if v == "" {
		return "(devel)"
	}
	if v[0] >= '0' && v[0] <= '9' && strings.Contains(v, ".") {
		return "v" + v // a bare semantic version, as OSU prints "v7.4"
	}
	return v
}

// writeDatatype prints OSU's "# Datatype: MPI_CHAR." line with goccl's name.
func writeDatatype(w io.Writer, name string) {
	fmt.Fprintf(w, "# Datatype: %s.\n", name)
}

// writeBackToBack says, under the Datatype line, that the rows of
// --back-to-back are not timed as OSU times.
func writeBackToBack(w io.Writer) {
	fmt.Fprintln(w, "# Timing: back to back (the calls of a size timed together, no barrier between them; not OSU's method).")
}

// writeCollHeader is print_only_header for blocking collectives.
// noSize drops the size column (osu_barrier).
func writeCollHeader(w io.Writer, noSize, full, validate bool) {
	if noSize {
		fmt.Fprintf(w, "# Avg Latency(us)")
	} else {
		fmt.Fprintf(w, "%-*s%*s", sizeWidth, "# Size", fieldWidth, "Avg Latency(us)")
	}
	if full {
		fmt.Fprintf(w, "%*s%*s%*s", fieldWidth, "Min Latency(us)", fieldWidth, "Max Latency(us)", itersWidth, "Iterations")
	}
	if validate {
		fmt.Fprintf(w, "%*s", fieldWidth, "Validation")
	}
	fmt.Fprintln(w)
}

// CollRow is one row of a blocking collective (times in microseconds,
// averaged over iterations; Avg over ranks, Min and Max across ranks).
type CollRow struct {
	Size          int
	Avg, Min, Max float64
	Iterations    int
	Errors        int
}

// writeCollRow is print_stats / print_stats_validate.
func writeCollRow(w io.Writer, r CollRow, noSize, full, validate bool) {
	if noSize {
		fmt.Fprintf(w, "%*.*f", 17, precision, r.Avg)
	} else {
		fmt.Fprintf(w, "%-*d%*.*f", sizeWidth, r.Size, fieldWidth, precision, r.Avg)
	}
	if full {
		fmt.Fprintf(w, "%*.*f%*.*f%*d", fieldWidth, precision, r.Min, fieldWidth, precision, r.Max, itersWidth, r.Iterations)
	}
	if validate {
		fmt.Fprintf(w, "%*s", fieldWidth, validation(r.Errors))
	}
	fmt.Fprintln(w)
}

// writeNBCPreamble is print_preamble_nbc.
func writeNBCPreamble(w io.Writer, title string, m Meta) {
	writeTitle(w, title, m, true)
	fmt.Fprintf(w, "# Overall = Coll. Init + Compute + Test + Wait\n\n")
}

// writeNBCHeader is print_only_header_nbc.
func writeNBCHeader(w io.Writer, full, validate bool) {
	fmt.Fprintf(w, "%-*s%*s", sizeWidth, "# Size", fieldWidth, "Overall(us)")
	if full {
		for _, h := range []string{"Compute(us)", "Coll. Init(us)", "Test(us)", "Wait(us)", "Pure Comm.(us)", "Min Comm.(us)", "Max Comm.(us)", "Overlap(%)"} {
			fmt.Fprintf(w, "%*s", fieldWidth, h)
		}
	} else {
		for _, h := range []string{"Compute(us)", "Pure Comm.(us)", "Overlap(%)"} {
			fmt.Fprintf(w, "%*s", fieldWidth, h)
		}
	}
	if validate {
		fmt.Fprintf(w, "%*s", fieldWidth, "Validation")
	}
	fmt.Fprintln(w)
}

// NBCRow is one row of a non-blocking collective, every time in
// microseconds per iteration averaged over ranks (MinComm and MaxComm
// across ranks). Compute includes the Test calls made during it.
type NBCRow struct {
	Size                         int
	Overall, Compute, Init, Test float64
	Wait, Comm, MinComm, MaxComm float64
	Errors                       int
}

// Overlap is OSU's overlap percentage: how much of the pure communication
// time the compute hid.
func (r NBCRow) Overlap() float64 {
	if r.Comm <= 0 {
		return 0
	}
	return max(0, 100-((r.Overall-(r.Compute-r.Test))/r.Comm)*100)
}

// writeNBCRow is print_stats_nbc.
func writeNBCRow(w io.Writer, r NBCRow, full, validate bool) {
	fmt.Fprintf(w, "%-*d%*.*f", sizeWidth, r.Size, fieldWidth, precision, r.Overall)
	vals := []float64{r.Compute - r.Test, r.Comm, r.Overlap()}
	if full {
		vals = []float64{r.Compute - r.Test, r.Init, r.Test, r.Wait, r.Comm, r.MinComm, r.MaxComm, r.Overlap()}
	}
	for _, v := range vals {
		fmt.Fprintf(w, "%*.*f", fieldWidth, precision, v)
	}
	if validate {
		fmt.Fprintf(w, "%*s", fieldWidth, validation(r.Errors))
	}
	fmt.Fprintln(w)
}

// writePt2ptHeader is print_header for point-to-point tests: no blank line
// before the title, and the column header before the datatype line.
func writePt2ptHeader(w io.Writer, title string, m Meta, bandwidth, validate bool) {
	writeTitle(w, title, m, false)
	col := "Latency (us)"
	if bandwidth {
		col = "Bandwidth (MB/s)"
	}
	fmt.Fprintf(w, "%-*s%*s", sizeWidth, "# Size", fieldWidth, col)
	if validate {
		fmt.Fprintf(w, "%*s", fieldWidth, "Validation")
	}
	fmt.Fprintln(w)
}

// writePt2ptRow prints one latency (us) or bandwidth (MB/s) row.
func writePt2ptRow(w io.Writer, size int, value float64, validate bool, errors int) {
	fmt.Fprintf(w, "%-*d%*.*f", sizeWidth, size, fieldWidth, precision, value)
	if validate {
		fmt.Fprintf(w, "%*s", fieldWidth, validation(errors))
	}
	fmt.Fprintln(w)
}
