package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

func TestSoakSingleRank(t *testing.T) {
	for _, k := range []string{"GOCCL_RANK", "RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"} {
		os.Unsetenv(k)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"-n", "200", "-max-bytes", "65536", "-report", "100"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "200 collectives over 1 ranks") || !strings.Contains(out.String(), "all verified") {
		t.Fatalf("output: %s", out.String())
	}
}

func TestSoakBadFlags(t *testing.T) {
	var out, errb bytes.Buffer
	for _, args := range [][]string{{"-n", "0"}, {"-max-bytes", "4"}, {"x"}} {
		if code := run(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}
