package comm

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
)

// A GOCCL_* variable within two edits of one goccl reads is reported with
// the one meant (GOCCL_TRASNPORT=tcp was ignored without a word); the
// variables goccl reads, other programs' and the project's scripts' and
// tests' own GOCCL_* names are not.
func TestMisspelledVariables(t *testing.T) {
	env := []string{
		"GOCCL_TRASNPORT=tcp", "GOCCL_TRANSPORTS=tcp", "GOCCL_SOCKET_IFNAM=eth0", "GOCCL_chunk_size=1", "goccl_debug=1",
		"GOCCL_ALGO=allreduce:ring", "GOCCL_TRANSPORT=shm", "GOCCL_RANK=0", "NCCL_DEBUG=INFO", "GOCCL_DEBUG",
		// The scripts' and tests' own variables.
		"GOCCL_X=1", "GOCCL_VM_MEM=2G", "GOCCL_VM_CMDS=x", "GOCCL_TEST_TRIALS=3", "GOCCL_TEST_SCALE=1",
		"GOCCL_SHM_CHILD_MEM=1", "GOCCL_SHM_CHILD_SIZE=1", "GOCCL_SHM_CHILD_CMA=1", "GOCCL_REQUIRE_VERBS=1",
		"GOCCL_WRITE_CORPUS=1", "GOCCL_COMMAND=x", "GOCCL_IBV_ABI_H=x", "GOCCL_NOVERBS_INNER=1",
		"GOCCL_VERBS_TEST_CHILD=1", "GOCCL_SHM_TEST_CHILD=1", "GOCCL_TEST_FORWARDED=1", "GOCCL_VM_KEEP=1",
		"GOCCL_VM_TIMEOUT=1", "GOCCL_VM_ENV=1", "GOCCL_VM_NETDEV=1", "GOCCL_VM_ACCEL=1", "GOCCL_VM_BINS=1",
		"GOCCL_VM_CACHE=1", "GOCCL_TEST_SCALE_TRANSPORT=1", "GOCCL_TEST_BOUND_CHILD=1", "GOCCL_TEST_BIND_CHILD=1",
		"GOCCL_NOVERBS_HOST_TEST=1",
	}
	got := misspelled(env)
	want := [][2]string{
		{"GOCCL_TRASNPORT", "GOCCL_TRANSPORT"},
		{"GOCCL_TRANSPORTS", "GOCCL_TRANSPORT"},
		{"GOCCL_SOCKET_IFNAM", "GOCCL_SOCKET_IFNAME"},
		{"GOCCL_chunk_size", "GOCCL_CHUNK_SIZE"},
		{"goccl_debug", "GOCCL_DEBUG"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("misspelled: got %v, want %v", got, want)
	}
	for _, c := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"ab", "ba", 1}, {"abc", "", 3}, {"kitten", "sitting", 3}, {"GOCCL_SLOTS", "GOCCL_SLOT", 1}} {
		if d := editDistance(c.a, c.b); d != c.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, d, c.d)
		}
	}
	// Logged once per process, as a warning.
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, nil))
	warnMisspelledOnce = sync.Once{}
	warnMisspelled(l, env)
	warnMisspelled(l, env)
	if n := strings.Count(buf.String(), "did you mean GOCCL_TRANSPORT?"); n != 2 || !strings.Contains(buf.String(), "level=WARN") {
		t.Fatalf("log: %q; want each misspelling once, as a warning", buf.String())
	}
}
