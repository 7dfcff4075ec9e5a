package peers

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
)

// A Table is the comparison's result: per size, the median over rounds of
// each program's time, and the peers' ratios to goccl.
type Table struct {
	Title    string
	Programs []Program       // goccl first, then the peers
	Sizes    []int           // every size goccl has a median for, ascending
	Median   map[string]Rows // by program name
	// Notes are printed as '#' lines under the header lines of the
	// text form (what the host's state was, see CompareSteady).
	Notes []string
}

// NewTable takes the medians of runs (by program name, one Rows per round).
// Programs[0] is the reference (goccl).
func NewTable(title string, programs []Program, runs map[string][]Rows) *Table {
	t := &Table{Title: title, Programs: programs, Median: map[string]Rows{}}
	for _, p := range programs {
		m := Rows{}
		bySize := map[int][]float64{}
		for _, r := range runs[p.Name] {
			for size, us := range r {
				bySize[size] = append(bySize[size], us)
			}
		}
		for size, v := range bySize {
			m[size] = median(v)
		}
		t.Median[p.Name] = m
	}
	for size := range t.Median[programs[0].Name] {
		t.Sizes = append(t.Sizes, size)
	}
	sort.Ints(t.Sizes)
	return t
}

// median of v (not empty): the middle value, or the mean of the middle two.
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Ratio is peer's median time over goccl's at size (above 1: goccl is
// faster), and false when either is missing or goccl's is 0.
func (t *Table) Ratio(peer string, size int) (float64, bool) {
	g, ok := t.Median[t.Programs[0].Name][size]
	p, ok2 := t.Median[peer][size]
	if !ok || !ok2 || g <= 0 {
		return 0, false
	}
	return p / g, true
}

// WriteText writes the table as the harness prints it: '#' header lines,
// then "bytes goccl_us peer_us ratio ..." per size; "-" marks a size a peer
// did not report.
func (t *Table) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n", t.Title)
	fmt.Fprintf(&b, "# median over rounds of each program's average us per call; ratio = peer_us / goccl_us, above 1 means goccl is faster\n")
	for _, n := range t.Notes {
		fmt.Fprintf(&b, "# %s\n", n)
	}
	fmt.Fprintf(&b, "%-12s %12s", "# bytes", t.Programs[0].Name+"_us")
	for _, p := range t.Programs[1:] {
		fmt.Fprintf(&b, " %14s %8s", p.Name+"_us", "ratio")
	}
	b.WriteString("\n")
	for _, size := range t.Sizes {
		fmt.Fprintf(&b, "%-12d %12.2f", size, t.Median[t.Programs[0].Name][size])
		for _, p := range t.Programs[1:] {
			us, ok := t.Median[p.Name][size]
			r, rok := t.Ratio(p.Name, size)
			fmt.Fprintf(&b, " %14s %8s", fmtOr(ok, "%.2f", us), fmtRatio(r, rok))
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteMarkdown writes the table for a README: sizes with binary units,
// times in µs with three significant digits, ratios with two decimals.
func (t *Table) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "| bytes | %s (µs) |", t.Programs[0].Label)
	align := "|---:|---:|"
	for _, p := range t.Programs[1:] {
		fmt.Fprintf(&b, " %s (µs) | ratio |", p.Label)
		align += "---:|---:|"
	}
	b.WriteString("\n" + align + "\n")
	for _, size := range t.Sizes {
		fmt.Fprintf(&b, "| %s | %s |", HumanSize(size), fmtUs(t.Median[t.Programs[0].Name][size]))
		for _, p := range t.Programs[1:] {
			us, ok := t.Median[p.Name][size]
			r, rok := t.Ratio(p.Name, size)
			s := "-"
			if ok {
				s = fmtUs(us)
			}
			fmt.Fprintf(&b, " %s | %s |", s, fmtRatio(r, rok))
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func fmtOr(ok bool, format string, v float64) string {
	if !ok {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

// fmtRatio prints a ratio with two decimals, or two significant digits
// when that would round it to 0.0x.
func fmtRatio(r float64, ok bool) string {
	switch {
	case !ok:
		return "-"
	case r < 0.095:
		return fmt.Sprintf("%.2g", r)
	}
	return fmt.Sprintf("%.2f", r)
}

// fmtUs prints a time with three significant digits, without an exponent.
func fmtUs(us float64) string {
	switch {
	case us >= 100:
		return fmt.Sprintf("%.0f", us)
	case us >= 10:
		return fmt.Sprintf("%.1f", us)
	}
	return fmt.Sprintf("%.2f", us)
}

// HumanSize writes a byte count with a binary unit when it is a whole
// number of them: 8, 1536, 1 KiB, 64 MiB.
func HumanSize(n int) string {
	for _, u := range []struct {
		name string
		size int
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d %s", n/u.size, u.name)
		}
	}
	return fmt.Sprint(n)
}
