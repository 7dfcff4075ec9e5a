package peers

import (
	"math"
	"os"
	"reflect"
	"testing"
)

func TestParseRowsGocclUnderGorun(t *testing.T) {
	out, err := os.ReadFile("testdata/goccl_allreduce.txt")
	if err != nil {
		t.Fatal(err)
	}
	// What else may reach the harness: gorun's messages, a rank's
	// warning, a duplicated row from a second rank, a blank tagged line.
	out = append(out, []byte("[1] 64   99.99\n[0] Warning! Limiting max message size to: 64.\n[1] \ngorun: rank 1 exited 0\n")...)
	rows, transport := ParseRows(out)
	want := Rows{4: 50.95, 8: 71.10, 16: 101.20, 32: 53.77, 64: 45.30}
	if !reflect.DeepEqual(rows, want) || transport != "tcp" {
		t.Errorf("got %v over %q, want %v over tcp", rows, transport, want)
	}
}

func TestParseRowsDriver(t *testing.T) {
	out, err := os.ReadFile("testdata/mpi_reduce_scatter.txt")
	if err != nil {
		t.Fatal(err)
	}
	rows, transport := ParseRows(out)
	want := Rows{16: 137.06, 32: 562.42, 64: 351.37}
	if !reflect.DeepEqual(rows, want) || transport != "" {
		t.Errorf("got %v over %q, want %v and no transport", rows, transport, want)
	}
}

func TestParseRowsIgnoresJunk(t *testing.T) {
	for _, in := range []string{
		"", "\n\n", "# 8 12.5\n", "8\n", "x 12.5\n", "8 x\n", "8 NaN\n", "8 +Inf\n", "-8 12\n", "8 -1\n", "8.5 12\n",
		"DATA VALIDATION ERROR: osu_allreduce exited with status 1 on message size 8.\n",
		"[0]\n", "[12]# Size Avg\n",
	} {
		if rows, _ := ParseRows([]byte(in)); len(rows) != 0 {
			t.Errorf("%q: parsed %v", in, rows)
		}
	}
	rows, _ := ParseRows([]byte("[3]8 1e2\r\n  16\t3.5  extra\n"))
	if !reflect.DeepEqual(rows, Rows{8: 100, 16: 3.5}) {
		t.Errorf("got %v", rows)
	}
}

// ParseRows reads output from programs it does not control: it never
// panics and keeps only sane rows.
func FuzzParseRows(f *testing.F) {
	f.Add([]byte("[0] # Transport: tcp\n[0] 8 1.5\n"))
	f.Add([]byte("# bytes avg_us\n16 137.06 102.49 181.30\n"))
	f.Add([]byte("\x00\xff[99999999999999999999] 1 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		rows, _ := ParseRows(b)
		for size, us := range rows {
			if size < 0 || !(us >= 0) || math.IsInf(us, 0) {
				t.Fatalf("row %d %v", size, us)
			}
		}
	})
}
