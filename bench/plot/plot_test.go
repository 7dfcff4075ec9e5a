package plot

import (
	"testing"

	"github.com/goccl/goccl/bench/osu"
)

// A legend names the run's transport, algorithm and ranks; auto's list of
// candidates (a line longer than the picture is wide) is left out.
func TestLabel(t *testing.T) {
	for _, tc := range []struct {
		rec  osu.Record
		want string
	}{
		{osu.Record{Transport: "shm", Algorithm: "auto(hier-leader|hier-ring|rabenseifner|recursive-doubling|ring|tree)", Ranks: 2}, "tcp (shm, auto, np=2)"},
		{osu.Record{Transport: "tcp", Algorithm: "ring", Ranks: 4}, "tcp (tcp, ring, np=4)"},
		{osu.Record{Transport: "tcp", Ranks: 4}, "tcp (tcp, np=4)"},
	} {
		if got := Label("tcp", []osu.Record{tc.rec}); got != tc.want {
			t.Errorf("Label(%+v) = %q, want %q", tc.rec, got, tc.want)
		}
	}
	if got := Label("run", nil); got != "run" {
		t.Errorf("Label of no records = %q", got)
	}
}
