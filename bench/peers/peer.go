package peers

import (
	"fmt"
	"path/filepath"
	"strconv"
)

// A Peer is a library goccl is compared with, and how to run its driver
// (which times every operation of Ops).
type Peer struct {
	Name   string // on the command line: mpi-tcp
	Label  string // in tables: Open MPI TCP
	Driver string // the driver program: mpi_bench or gloo_bench
}

// Peers are the peers the harness knows.
var Peers = []*Peer{
	{Name: "mpi-tcp", Label: "Open MPI TCP", Driver: "mpi_bench"},
	{Name: "mpi-shm", Label: "Open MPI shm", Driver: "mpi_bench"},
	{Name: "gloo-tcp", Label: "Gloo TCP", Driver: "gloo_bench"},
	// Not a library: bench/cmd/tcpfloor, two bare Go processes doing the
	// operation's loop over loopback TCP with nothing else (latency and
	// bcast, 2 ranks), the floor under every TCP column. Built from the
	// repository into bin/ with gorun and osu, not by Build.
	{Name: "floor-tcp", Label: "bare TCP floor", Driver: FloorDriver},
}

// FloorDriver is floor-tcp's program, bin/tcpfloor of the repository.
const FloorDriver = "tcpfloor"

// FloorOps are the operations floor-tcp times (2 ranks, up to 1 MiB).
var FloorOps = []string{"latency", "bcast"}

// PeerNamed returns the peer called name, or nil.
func PeerNamed(name string) *Peer {
	for _, p := range Peers {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// PeerNames lists the peers' names.
func PeerNames() []string {
	var s []string
	for _, p := range Peers {
		s = append(s, p.Name)
	}
	return s
}

// mallocEnv keeps freed memory in the peers' processes (see the package
// documentation, Methodology).
var mallocEnv = []string{"MALLOC_MMAP_MAX_=0", "MALLOC_TRIM_THRESHOLD_=68719476736"}

// A proc is one process to start: its arguments and the variables added to
// the harness's environment.
type proc struct {
	argv []string
	env  []string
}

// procs are the processes of one run of p's driver from the directory bin;
// the first one's standard output holds the rows. store is a fresh
// directory for Gloo's file store.
func (p *Peer) procs(bin string, c *Config, store string) []proc {
	args := []string{c.Op, strconv.Itoa(c.Min), strconv.Itoa(c.Max), strconv.Itoa(c.Iters), strconv.Itoa(c.Warmup)}
	if c.Method == MethodB2B {
		args = append(args, MethodB2B)
	}
	driver := filepath.Join(bin, p.Driver)
	switch p.Name {
	case "floor-tcp":
		argv := []string{filepath.Join("bin", FloorDriver), c.Op, "-m", fmt.Sprintf("%d:%d", c.Min, c.Max),
			"-i", strconv.Itoa(c.Iters), "-x", strconv.Itoa(c.Warmup), "-osu-rows"}
		if c.BackToBack() {
			argv = append(argv, "-b2b")
		}
		return []proc{{argv: argv}}
	case "mpi-tcp", "mpi-shm":
		argv := []string{"mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
			"-x", "MALLOC_MMAP_MAX_", "-x", "MALLOC_TRIM_THRESHOLD_", "-np", strconv.Itoa(c.NP), "--mca", "pml", "ob1"}
		if p.Name == "mpi-tcp" {
			argv = append(argv, "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo")
		} else {
			argv = append(argv, "--mca", "btl", "vader,self")
		}
		return []proc{{argv: append(append(argv, driver), args...), env: mallocEnv}}
	case "gloo-tcp":
		algo := c.GlooAlgo
		if algo == "" {
			algo = "torch"
		}
		ps := make([]proc, c.NP)
		for r := range ps {
			env := append([]string{
				"RANK=" + strconv.Itoa(r), "WORLD_SIZE=" + strconv.Itoa(c.NP),
				"GLOO_STORE=" + store, "GLOO_ALLREDUCE=" + algo,
			}, mallocEnv...)
			ps[r] = proc{argv: append([]string{driver}, args...), env: env}
		}
		return ps
	}
	panic(fmt.Sprintf("peers: no launch for peer %q", p.Name))
}
