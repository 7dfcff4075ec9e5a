package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// methodMark is the one-letter label of how a time was obtained.
var methodMark = map[string]string{"full": "", "periodic": "", "extrapolated": " ~", "analytic": " *"}

// writeTables prints, per collective and rank count, every algorithm's time
// at every size, the fastest, the selector's pick (and how much slower it
// is than the fastest), and the fastest's busiest port.
func writeTables(w io.Writer, points []*point) error {
	var group []*point
	flush := func() error {
		if len(group) == 0 {
			return nil
		}
		pt := group[0]
		hosts := "1 host"
		if pt.Hosts > 1 {
			hosts = fmt.Sprintf("%d hosts", pt.Hosts)
		}
		what := "size"
		if pt.Block > 0 {
			what = "block"
		}
		fmt.Fprintf(w, "\n## %s on %d ranks (%s)\n", pt.Coll, pt.Ranks, hosts)
		tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
		head := []string{what}
		for _, a := range pt.Algos {
			head = append(head, a.Algo)
		}
		head = append(head, "fastest", "selector", "busiest port of the fastest", "")
		fmt.Fprintln(tw, strings.Join(head, "\t"))
		for _, pt := range group {
			size := pt.Bytes
			if pt.Block > 0 {
				size = pt.Block
			}
			row := []string{sizeLabel(size)}
			for _, a := range pt.Algos {
				if a.Err != "" {
					row = append(row, "error")
					continue
				}
				row = append(row, seconds(a.Seconds)+methodMark[a.Method])
			}
			sel := pt.Selector
			if pt.Selector != pt.Best {
				if b, s := pt.find(pt.Best), pt.find(pt.Selector); b != nil && s != nil && b.Seconds > 0 {
					sel += fmt.Sprintf(" (+%.0f%%)", (s.Seconds/b.Seconds-1)*100)
				}
			}
			port := ""
			if b := pt.find(pt.Best); b != nil {
				port = byteCount(b.BusiestBytes)
				if b.BusiestPort != "" {
					port += " " + b.BusiestPort
				} else {
					port += " (busiest rank)"
				}
			}
			row = append(row, pt.Best, sel, port, "")
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
		group = group[:0]
		return tw.Flush()
	}
	for _, pt := range points {
		if len(group) > 0 && (group[0].Coll != pt.Coll || group[0].Ranks != pt.Ranks) {
			if err := flush(); err != nil {
				return err
			}
		}
		group = append(group, pt)
	}
	if err := flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\n(times: the slowest rank; ~ extrapolated from two smaller sizes; * the registry's alpha-beta-gamma cost, not simulated)")
	return nil
}

// writeCrossover prints, per collective, a Markdown matrix of the fastest
// algorithm by size (rows) and rank count (columns), with the selector's
// pick where it differs.
func writeCrossover(w io.Writer, points []*point) {
	type key struct {
		coll  string
		ranks int
		size  int
	}
	cell := map[key]*point{}
	var colls []string
	ranks := map[string][]int{}
	sizes := map[string][]int{}
	for _, pt := range points {
		size := pt.Bytes
		if pt.Block > 0 {
			size = pt.Block
		}
		if _, ok := ranks[pt.Coll]; !ok {
			colls = append(colls, pt.Coll)
		}
		if !containsInt(ranks[pt.Coll], pt.Ranks) {
			ranks[pt.Coll] = append(ranks[pt.Coll], pt.Ranks)
		}
		if !containsInt(sizes[pt.Coll], size) {
			sizes[pt.Coll] = append(sizes[pt.Coll], size)
		}
		cell[key{pt.Coll, pt.Ranks, size}] = pt
	}
	for _, c := range colls {
		what := "size"
		if strings.Contains(c, "all") && strings.Contains(c, "to") {
			what = "block"
		}
		fmt.Fprintf(w, "\n### %s: fastest simulated [selector's pick, when different]\n\n| %s |", c, what)
		for _, p := range ranks[c] {
			fmt.Fprintf(w, " %d ranks |", p)
		}
		fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("---|", len(ranks[c])))
		for _, s := range sizes[c] {
			fmt.Fprintf(w, "| %s |", sizeLabel(s))
			for _, p := range ranks[c] {
				pt := cell[key{c, p, s}]
				txt := "-"
				if pt != nil && pt.Best != "" {
					txt = short(pt.Best)
					if b := pt.find(pt.Best); b != nil && methodMark[b.Method] != "" {
						txt += strings.TrimSpace(methodMark[b.Method])
					}
					if pt.Selector != pt.Best {
						txt += " [" + short(pt.Selector) + "]"
					}
				}
				fmt.Fprintf(w, " %s |", txt)
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprintf(w, "\n(%s; ~ extrapolated, * analytic)\n", abbreviations())
}

func abbreviations() string {
	var parts []string
	for _, a := range []string{"recursive-doubling", "rabenseifner", "ring", "tree", "binomial", "pipeline", "scatter-allgather", "pairwise", "bruck"} {
		parts = append(parts, short(a)+" = "+a)
	}
	return strings.Join(parts, ", ")
}

func writeJSON(w io.Writer, points []*point) error {
	enc := json.NewEncoder(w)
	for _, pt := range points {
		if err := enc.Encode(pt); err != nil {
			return err
		}
	}
	return nil
}

func containsInt(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// byteCount prints bytes with a binary prefix.
func byteCount(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.3gGiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.3gMiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.3gKiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0fB", b)
}
