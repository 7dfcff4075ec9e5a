package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestCutLabel(t *testing.T) {
	for in, want := range map[string]string{
		"0: hello\n":    "0|hello\n",
		"  12: x: y\n":  "12|x: y\n",
		"3:\n":          "3|\n",
		"srun: error\n": "",
		"12345678: x":   "",
		"no label":      "",
	} {
		r, text, ok := cutLabel([]byte(in))
		got := ""
		if ok {
			got = fmt.Sprintf("%d|%s", r, text)
		}
		if got != want {
			t.Errorf("cutLabel(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseSrunError(t *testing.T) {
	for in, want := range map[string]string{
		"srun: error: n1: task 2: Exited with exit code 3\n": "n1 2 exited with status 3 3",
		"srun: error: vm: tasks 0-1: Killed":                 "vm 0 killed by signal: killed 137",
		"srun: error: vm: task 4: Terminated":                "vm 4 killed by signal: terminated 143",
		"srun: Job step aborted":                             "",
	} {
		f, ok := parseSrunError([]byte(in))
		got := ""
		if ok {
			got = fmt.Sprintf("%s %d %s %d", f.node, f.rank, f.cause, f.code)
		}
		if got != want {
			t.Errorf("parseSrunError(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSlurmCPUs(t *testing.T) {
	for in, want := range map[string]int{"4": 4, "2(x3),1": 7, "": 0, "x": 0, "2(x": 0} {
		lookup := func(string) (string, bool) { return in, true }
		if got := slurmCPUs(lookup); got != want {
			t.Errorf("slurmCPUs(%q) = %d, want %d", in, got, want)
		}
	}
}

// fakeSrun runs the tasks of a step on this machine with the variables
// srun sets, labelling their output as srun --label does, and reports its
// own arguments on stderr.
const fakeSrun = `#!/bin/sh
echo "srun-args: $*" >&2
n=1
while :; do
	case $1 in
	--ntasks=*) n=${1#--ntasks=}; shift;;
	--chdir=*) cd "${1#--chdir=}" || exit 1; shift;;
	-*) shift;;
	*) break;;
	esac
done
i=0
while [ $i -lt $n ]; do
	(SLURM_PROCID=$i SLURM_LOCALID=$i SLURM_NTASKS=$n SLURM_NODEID=0 SLURM_STEP_ID=0 \
		SLURM_STEP_NODELIST=localhost SLURM_STEP_TASKS_PER_NODE=$n "$@" 2>&1 | sed "s/^/$i: /") &
	i=$((i+1))
done
wait
`

// Inside an allocation gorun starts the ranks with srun; each task's gorun
// shim turns SLURM_* into the rank's variables.
func TestSrunLaunch(t *testing.T) {
	srun := filepath.Join(t.TempDir(), "srun")
	if err := os.WriteFile(srun, []byte(fakeSrun), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLURM_JOB_ID", "42")
	t.Setenv("SLURM_JOB_NODELIST", "localhost")
	t.Setenv("SLURM_NTASKS", "3")
	t.Setenv("SLURM_JOB_CPUS_PER_NODE", "2")
	t.Setenv("SLURM_PROCID", "0") // as in a batch script; must not reach the ranks as theirs
	t.Setenv("RANK", "7")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, stdout, stderr, _ := gorun(t, ctx, "bootstrap", "--srun", srun)
	if code != 0 {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for r := range 3 {
		if want := fmt.Sprintf("[%d] source=gorun allgather=0,10,20\n", r); !strings.Contains(stdout, want) {
			t.Errorf("missing %q in:\n%s", want, stdout)
		}
	}
	if !regexp.MustCompile(`(?m)^srun-args: --ntasks=3 --label --kill-on-bad-exit=1 --quit-on-interrupt --chdir=\S+ --overcommit /\S+ /\S+$`).MatchString(stderr) {
		t.Errorf("srun arguments; stderr:\n%s", stderr)
	}
	code, stdout, _, _ = gorun(t, ctx, "env", "--srun", srun, "-n", "2")
	if code != 0 {
		t.Fatalf("env: exit %d", code)
	}
	for _, want := range []string{"[1] env RANK=1\n", "[1] env LOCAL_WORLD_SIZE=2\n", "[0] env MASTER_ADDR=localhost\n", "[1] env GOCCL_LOCAL_RANK=1\n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("missing %q", want)
		}
	}
}
