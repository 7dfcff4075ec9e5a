package main

import (
	"bytes"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestMain lets the test binary be the receiver the root starts (the
// program starts itself again with TCPFLOOR_ROLE=recv).
func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == "recv" {
		os.Exit(run(append([]string{"tcpfloor"}, receiverArgs()...), os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// receiverArgs are the arguments the root passed on: the test binary's
// own flags (-test.*) come first and are dropped.
func receiverArgs() []string {
	args := os.Args[1:]
	for i, a := range args {
		if a == "bcast" || a == "latency" {
			return args[i:]
		}
	}
	return args
}

// TestTable runs both loops over two sizes and checks the table: a row
// per size with positive times, OSU's average of the ranks' times, and a
// count of acknowledgements that is a rate.
func TestTable(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second process and spins two cores; skipped with -short")
	}
	for _, op := range []string{"bcast", "latency"} {
		t.Run(op, func(t *testing.T) {
			var out, errb bytes.Buffer
			if rc := run([]string{"tcpfloor", op, "-m", "8:16", "-i", "300", "-x", "20"}, &out, &errb); rc != 0 {
				t.Fatalf("exit %d: %s", rc, errb.String())
			}
			var rows [][]float64
			for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				if strings.HasPrefix(line, "#") {
					continue
				}
				var row []float64
				for _, f := range strings.Fields(line) {
					v, err := strconv.ParseFloat(f, 64)
					if err != nil {
						t.Fatalf("row %q: %v", line, err)
					}
					row = append(row, v)
				}
				rows = append(rows, row)
			}
			want := 3
			if op == "bcast" {
				want = 5
			}
			if len(rows) != 2 || rows[0][0] != 8 || rows[1][0] != 16 {
				t.Fatalf("want rows for 8 and 16 bytes:\n%s", out.String())
			}
			for _, r := range rows {
				if len(r) != want {
					t.Fatalf("row %v: want %d columns:\n%s", r, want, out.String())
				}
				for _, v := range r[1 : want-1] {
					if v <= 0 {
						t.Fatalf("row %v: a time that is not positive:\n%s", r, out.String())
					}
				}
				if op == "bcast" && (r[3] < min(r[1], r[2]) || r[3] > max(r[1], r[2])) {
					t.Fatalf("row %v: the average is not between the ranks' times", r)
				}
				if acks := r[want-1]; acks < 0 || acks > 10 {
					t.Fatalf("row %v: %v acknowledgements per iteration", r, acks)
				}
			}
		})
	}
}

// TestBackToBackAndOSURows: -b2b times bcast back to back (the header
// says so) and -osu-rows prints only "bytes avg_us" rows, which
// bench/peers reads as its floor-tcp column.
func TestBackToBackAndOSURows(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second process and spins two cores; skipped with -short")
	}
	for _, args := range [][]string{
		{"tcpfloor", "bcast", "-m", "8:16", "-i", "300", "-x", "20", "-b2b", "-osu-rows"},
		{"tcpfloor", "bcast", "-m", "8:16", "-i", "300", "-x", "20", "-osu-rows"},
		{"tcpfloor", "latency", "-m", "8:16", "-i", "300", "-x", "20", "-osu-rows"},
	} {
		var out, errb bytes.Buffer
		if rc := run(args, &out, &errb); rc != 0 {
			t.Fatalf("%q: exit %d: %s", args, rc, errb.String())
		}
		b2b := slices.Contains(args, "-b2b")
		if strings.Contains(out.String(), "back to back") != b2b {
			t.Errorf("%q: the header does not say how it timed:\n%s", args, out.String())
		}
		rows := 0
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			if strings.HasPrefix(line, "#") {
				continue
			}
			f := strings.Fields(line)
			if len(f) != 2 {
				t.Fatalf("%q: row %q, want bytes and avg_us", args, line)
			}
			if us, err := strconv.ParseFloat(f[1], 64); err != nil || us <= 0 {
				t.Fatalf("%q: row %q: a time that is not positive", args, line)
			}
			rows++
		}
		if rows != 2 {
			t.Fatalf("%q: %d rows, want 8 and 16 bytes:\n%s", args, rows, out.String())
		}
	}
}

// TestUsage: wrong usage exits 2 and names the problem.
func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		{"tcpfloor"},
		{"tcpfloor", "allreduce"},
		{"tcpfloor", "bcast", "-m", "0:8"},
		{"tcpfloor", "bcast", "-m", "64:8"},
		{"tcpfloor", "bcast", "-i", "0"},
		{"tcpfloor", "bcast", "-work", "-1us"},
		{"tcpfloor", "bcast", "extra"},
		{"tcpfloor", "latency", "-b2b"},
	} {
		var out, errb bytes.Buffer
		if rc := run(args, &out, &errb); rc != 2 || !strings.Contains(errb.String(), "usage: tcpfloor") {
			t.Errorf("%q: exit %d, stderr %q; want 2 and the usage", args, rc, errb.String())
		}
	}
}
