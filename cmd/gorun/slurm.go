package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"github.com/goccl/goccl/bootstrap"
)

// shimEnv, set in srun's environment, makes each task's gorun act as the
// shim: it turns the task's SLURM_* variables into the rank's variables
// and replaces itself with the program.
const shimEnv = "GORUN_SRUN_SHIM"

// inSlurm reports whether gorun runs inside a Slurm allocation.
func inSlurm(lookup func(string) (string, bool)) bool {
	v, ok := lookup("SLURM_JOB_ID")
	return ok && v != ""
}

// slurmCPUs is the number of CPUs of the allocation, from
// SLURM_JOB_CPUS_PER_NODE ("4", "2(x3),1"); 0 when unknown.
func slurmCPUs(lookup func(string) (string, bool)) int {
	v, ok := lookup("SLURM_JOB_CPUS_PER_NODE")
	if !ok {
		return 0
	}
	total := 0
	for _, item := range strings.Split(v, ",") {
		n, rep := item, "1"
		if i := strings.IndexByte(item, '('); i >= 0 && strings.HasPrefix(item[i:], "(x") && strings.HasSuffix(item, ")") {
			n, rep = item[:i], item[i+2:len(item)-1]
		}
		a, err1 := strconv.Atoi(n)
		b, err2 := strconv.Atoi(rep)
		if err1 != nil || err2 != nil || a < 0 || b < 0 {
			return 0
		}
		total += a * b
	}
	return total
}

// slurmDefaultRanks is -n's default inside an allocation: SLURM_NTASKS,
// else the allocation's CPUs; 0 when neither is known.
func slurmDefaultRanks(lookup func(string) (string, bool)) int {
	if v, ok := lookup("SLURM_NTASKS"); ok {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			return n
		}
	}
	return slurmCPUs(lookup)
}

// slurmNodes are the allocation's nodes, as hosts (for choosing the store
// address).
func slurmNodes(lookup func(string) (string, bool)) ([]host, error) {
	for _, name := range []string{"SLURM_JOB_NODELIST", "SLURM_NODELIST"} {
		if v, ok := lookup(name); ok && v != "" {
			names, err := bootstrap.ExpandHostlist(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", name, err)
			}
			hosts := make([]host, len(names))
			for i, n := range names {
				hosts[i] = host{name: n, slots: 1}
			}
			return hosts, nil
		}
	}
	return nil, fmt.Errorf("SLURM_JOB_NODELIST is not set")
}

// slurmResolve resolves a node name, falling back to the NodeAddr that
// `scontrol show node` reports (node names need not be in DNS).
func slurmResolve(name string) (net.IP, error) {
	ip, err := lookupIP(name)
	if err == nil {
		return ip, nil
	}
	out, serr := exec.Command("scontrol", "show", "node", "-o", name).Output()
	if serr == nil {
		for _, f := range strings.Fields(string(out)) {
			if a, ok := strings.CutPrefix(f, "NodeAddr="); ok {
				if ip, err2 := lookupIP(a); err2 == nil {
					return ip, nil
				}
			}
		}
	}
	return nil, err
}

// srunArgv is the srun command line that starts n ranks: each task runs
// gorun itself as the shim (exe), which execs prog. --quit-on-interrupt
// makes srun pass one SIGINT to the tasks (without it srun only prints
// their state); srun ends the step on SIGTERM itself.
func srunArgv(srunCmd []string, n int, overcommit bool, dir, exe string, argv []string) []string {
	out := append([]string{}, srunCmd...)
	out = append(out, "--ntasks="+strconv.Itoa(n), "--label", "--kill-on-bad-exit=1", "--quit-on-interrupt", "--chdir="+dir)
	if overcommit {
		out = append(out, "--overcommit")
	}
	out = append(out, exe)
	return append(out, argv...)
}

// srunEnv is srun's environment: gorun's, without other launchers' rank
// variables, with the -x variables, the job-wide launcher variables and
// the shim switch. srun passes it to every task; the shim adds the rest.
func srunEnv(base []string, extra []kv, store, secretHex string, masterPort int) []string {
	return mergeEnv(base, extra, []kv{
		{"GOCCL_BOOTSTRAP", store}, {"GOCCL_SECRET", secretHex},
		{"MASTER_PORT", strconv.Itoa(masterPort)}, {shimEnv, "1"},
	})
}

// shim runs in each srun task: it sets the rank's variables from the
// task's SLURM_* ones (through bootstrap, so that gorun and goccl agree)
// and execs args. It returns only on failure.
func shim(args []string) int {
	os.Unsetenv(shimEnv)
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "gorun (srun task): "+format+"\n", a...)
		return 127
	}
	if len(args) == 0 {
		return fail("no program")
	}
	info, err := bootstrap.FromEnv()
	if err != nil {
		return fail("%v", err)
	}
	master := "127.0.0.1"
	for _, name := range []string{"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"} {
		if v := os.Getenv(name); v != "" {
			if nodes, err := bootstrap.ExpandHostlist(v); err == nil {
				master = nodes[0] // task 0's node under block and cyclic distribution
				break
			}
		}
	}
	p := placement{rank: info.Rank, localRank: info.LocalRank, localSize: info.LocalSize}
	vars := rankVars(p, info.Size, info.Addr, os.Getenv("GOCCL_SECRET"), master, 0)
	for _, e := range vars {
		if e.k == "MASTER_PORT" {
			continue // srunEnv set it, the same for every task
		}
		os.Setenv(e.k, e.v)
	}
	path, err := exec.LookPath(args[0])
	if err != nil {
		return fail("%v", err)
	}
	err = syscall.Exec(path, args, os.Environ())
	return fail("exec %s: %v", path, err)
}

// srunTaskError matches srun's report of a failed task, e.g.
// "srun: error: n1: task 2: Exited with exit code 3" or
// "srun: error: n0: tasks 0-1: Killed".
var srunTaskError = regexp.MustCompile(`^srun: error: (\S+): tasks? ([0-9]+)[^:]*: (.*)$`)

// srunFailure is the first task failure srun reported.
type srunFailure struct {
	node  string
	rank  int
	cause string
	code  int // the status gorun exits with
}

// parseSrunError recognises srun's task failure lines.
func parseSrunError(line []byte) (srunFailure, bool) {
	m := srunTaskError.FindSubmatch(bytes.TrimRight(line, "\r\n"))
	if m == nil {
		return srunFailure{}, false
	}
	f := srunFailure{node: string(m[1]), cause: string(m[3]), code: 1}
	f.rank, _ = strconv.Atoi(string(m[2]))
	if v, ok := strings.CutPrefix(f.cause, "Exited with exit code "); ok {
		if c, err := strconv.Atoi(v); err == nil {
			f.code = c
			f.cause = "exited with status " + v
		}
	} else {
		for sig := syscall.Signal(1); sig < 32; sig++ {
			if strings.EqualFold(f.cause, sig.String()) {
				f.code = 128 + int(sig)
				f.cause = "killed by signal: " + sig.String()
			}
		}
	}
	return f, true
}
