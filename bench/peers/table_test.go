package peers

import (
	"bytes"
	"flag"
	"os"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := "testdata/" + name + ".golden"
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -update rewrites it):\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

func testTable() *Table {
	programs := []Program{{Name: "goccl", Label: "goccl"}, {Name: "mpi-tcp", Label: "Open MPI TCP"}, {Name: "gloo-tcp", Label: "Gloo TCP"}}
	runs := map[string][]Rows{
		// Three rounds; 1 MiB is missing from one goccl round.
		"goccl": {
			{8: 40, 1024: 50, 1 << 20: 600, 64 << 20: 33000},
			{8: 44, 1024: 70, 64 << 20: 34000},
			{8: 43, 1024: 60, 1 << 20: 580, 64 << 20: 33316},
		},
		// Two rounds: medians are the means of two.
		"mpi-tcp": {
			{8: 7, 1024: 9, 1 << 20: 200, 64 << 20: 30000},
			{8: 8, 1024: 11, 1 << 20: 210, 64 << 20: 31524},
		},
		// No 1 KiB row, and a size goccl lacks.
		"gloo-tcp": {
			{8: 355, 1 << 20: 1108, 64 << 20: 37938, 3: 1},
		},
	}
	return NewTable("allreduce np=2 test", programs, runs)
}

func TestTableMediansAndRatios(t *testing.T) {
	tb := testTable()
	for _, c := range []struct {
		prog string
		size int
		want float64
	}{
		{"goccl", 8, 43}, {"goccl", 1024, 60}, {"goccl", 1 << 20, 590}, {"goccl", 64 << 20, 33316},
		{"mpi-tcp", 8, 7.5}, {"mpi-tcp", 1024, 10}, {"gloo-tcp", 1 << 20, 1108},
	} {
		if got := tb.Median[c.prog][c.size]; got != c.want {
			t.Errorf("median %s at %d = %v, want %v", c.prog, c.size, got, c.want)
		}
	}
	if want := []int{8, 1024, 1 << 20, 64 << 20}; !equalInts(tb.Sizes, want) {
		t.Errorf("sizes %v, want goccl's %v", tb.Sizes, want)
	}
	if r, ok := tb.Ratio("mpi-tcp", 1024); !ok || r != 10.0/60 {
		t.Errorf("ratio mpi-tcp 1024 = %v, %v", r, ok)
	}
	if _, ok := tb.Ratio("gloo-tcp", 1024); ok {
		t.Error("a ratio where gloo has no time")
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestTableText(t *testing.T) {
	var b bytes.Buffer
	if err := testTable().WriteText(&b); err != nil {
		t.Fatal(err)
	}
	golden(t, "table_text", b.Bytes())
	// The harness's own rows read back as goccl's medians.
	rows, _ := ParseRows(b.Bytes())
	if rows[1<<20] != 590 || len(rows) != 4 {
		t.Errorf("text table does not parse back: %v", rows)
	}
}

func TestTableMarkdown(t *testing.T) {
	var b bytes.Buffer
	if err := testTable().WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	golden(t, "table_markdown", b.Bytes())
}

func TestHumanSize(t *testing.T) {
	for n, want := range map[int]string{0: "0", 8: "8", 1000: "1000", 1024: "1 KiB", 1536: "1536", 3 << 20: "3 MiB", 1 << 30: "1 GiB", 1<<30 + 1024: "1048577 KiB"} {
		if got := HumanSize(n); got != want {
			t.Errorf("HumanSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestFmtRatio(t *testing.T) {
	for _, c := range []struct {
		r    float64
		want string
	}{{1.234, "1.23"}, {0.1, "0.10"}, {0.0046, "0.0046"}, {0.05, "0.05"}, {12, "12.00"}} {
		if got := fmtRatio(c.r, true); got != c.want {
			t.Errorf("fmtRatio(%v) = %q, want %q", c.r, got, c.want)
		}
	}
	if got := fmtRatio(1, false); got != "-" {
		t.Errorf("missing ratio printed as %q", got)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
