package bootstrap

import (
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"strconv"
	"time"
)

// Info is what a rank learns from its launcher: who it is, where the store
// is and the secret that admits it.
type Info struct {
	Rank, Size           int
	LocalRank, LocalSize int    // index and count of the ranks on this host
	Addr                 string // store address, host:port
	Secret               []byte
	Source               string // "gorun", "torchrun", "slurm" or "ompi"
	HostRoot             bool   // this rank must host the store (rank 0 when no launcher hosts it)
}

// ErrNoLauncher is wrapped by FromEnv's error when the environment names no
// known launcher. A caller may then choose to run as a single rank.
var ErrNoLauncher = errors.New("no launcher environment found")

// SecretWait is how long a rank that does not host the store waits for the
// hosting rank to create $HOME/.goccl/secret. GOCCL_SECRET_WAIT overrides
// it.
const SecretWait = 30 * time.Second

// FromEnv reads the rank's Info from the environment set by gorun,
// torchrun, Open MPI's mpirun or Slurm's srun; see the package
// documentation for the variables. Errors name the variable that is missing
// or malformed.
func FromEnv() (Info, error) {
	return fromEnv(os.LookupEnv)
}

// lookupFunc is os.LookupEnv's shape; tests pass a map's.
type lookupFunc func(string) (string, bool)

type envReader struct{ lookup lookupFunc }

func (e envReader) has(name string) bool {
	_, ok := e.lookup(name)
	return ok
}

// str returns a variable that must be set and non-empty.
func (e envReader) str(name string) (string, error) {
	v, ok := e.lookup(name)
	if !ok {
		return "", fmt.Errorf("bootstrap: %s is not set", name)
	}
	if v == "" {
		return "", fmt.Errorf("bootstrap: %s is empty", name)
	}
	return v, nil
}

// first returns the first of names that is set and non-empty, and its name.
func (e envReader) first(names ...string) (val, name string, ok bool) {
	for _, n := range names {
		if v, ok := e.lookup(n); ok && v != "" {
			return v, n, true
		}
	}
	return "", "", false
}

// int reads a variable that must hold an integer >= min.
func (e envReader) int(name string, min int) (int, error) {
	v, err := e.str(name)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min {
		return 0, fmt.Errorf("bootstrap: %s=%q is not an integer >= %d", name, v, min)
	}
	return n, nil
}

// port reads a variable holding a TCP port number.
func (e envReader) port(name string) (int, error) {
	v, err := e.str(name)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("bootstrap: %s=%q is not a port number (1-65535)", name, v)
	}
	return n, nil
}

// hostPort checks a host:port value read from variable name.
func hostPort(name, v string) (string, error) {
	host, p, err := net.SplitHostPort(v)
	if err != nil {
		return "", fmt.Errorf("bootstrap: %s=%q is not host:port: %v", name, v, err)
	}
	n, err := strconv.Atoi(p)
	if host == "" || err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("bootstrap: %s=%q is not host:port with a host and a port number (1-65535)", name, v)
	}
	return v, nil
}

// derivePort maps a job identifier to a port in [derivedPortMin,
// derivedPortMax), the same on every rank of the job: below Linux's
// default ephemeral range (32768-60999), whose ports are the local ends of
// the host's outgoing connections. (It was [20000, 40000): once in a CI
// run rank 0 of an mpirun job exited at start, most likely on a derived
// port that a connection of the run beside it held.)
func derivePort(id string) int {
	h := fnv.New32a()
	h.Write([]byte(id))
	return derivedPortMin + int(h.Sum32()%(derivedPortMax-derivedPortMin))
}

const derivedPortMin, derivedPortMax = 20000, 32768

func fromEnv(lookup lookupFunc) (Info, error) {
	e := envReader{lookup}
	// The store address is needed only when GOCCL_BOOTSTRAP does not
	// give it; each source computes it in its addr function.
	var (
		info Info
		addr func() (string, error)
		err  error
	)
	switch {
	case e.has("GOCCL_RANK"):
		info, addr, err = gorunEnv(e)
	case e.has("RANK") || e.has("WORLD_SIZE"):
		info, addr, err = torchrunEnv(e)
	case e.has("OMPI_COMM_WORLD_RANK"):
		info, addr, err = ompiEnv(e)
	case e.has("SLURM_PROCID"):
		info, addr, err = slurmEnv(e)
	default:
		return Info{}, fmt.Errorf("bootstrap: %w: run under gorun, torchrun, mpirun or srun, or set GOCCL_RANK, GOCCL_SIZE, GOCCL_LOCAL_RANK, GOCCL_LOCAL_SIZE, GOCCL_BOOTSTRAP", ErrNoLauncher)
	}
	if err != nil {
		return Info{}, err
	}
	if info.Rank >= info.Size {
		return Info{}, fmt.Errorf("bootstrap: %s: rank %d is not below size %d", info.Source, info.Rank, info.Size)
	}
	if info.LocalRank >= info.LocalSize || info.LocalSize > info.Size {
		return Info{}, fmt.Errorf("bootstrap: %s: local rank %d and local size %d do not fit size %d", info.Source, info.LocalRank, info.LocalSize, info.Size)
	}
	if v, ok := e.lookup("GOCCL_BOOTSTRAP"); ok {
		info.Addr, err = hostPort("GOCCL_BOOTSTRAP", v)
	} else {
		info.Addr, err = addr()
	}
	if err != nil {
		return Info{}, err
	}
	info.Secret, err = secretFromEnv(e, info.HostRoot)
	if err != nil {
		return Info{}, err
	}
	return info, nil
}

// ranks reads the four rank variables of a launcher.
func (e envReader) ranks(rank, size, localRank, localSize string) (Info, error) {
	var i Info
	var err error
	if i.Rank, err = e.int(rank, 0); err != nil {
		return i, err
	}
	if i.Size, err = e.int(size, 1); err != nil {
		return i, err
	}
	if i.LocalRank, err = e.int(localRank, 0); err != nil {
		return i, err
	}
	if i.LocalSize, err = e.int(localSize, 1); err != nil {
		return i, err
	}
	return i, nil
}

func gorunEnv(e envReader) (Info, func() (string, error), error) {
	i, err := e.ranks("GOCCL_RANK", "GOCCL_SIZE", "GOCCL_LOCAL_RANK", "GOCCL_LOCAL_SIZE")
	i.Source = "gorun"
	// gorun hosts the store itself; GOCCL_BOOTSTRAP is then mandatory.
	return i, func() (string, error) {
		_, err := e.str("GOCCL_BOOTSTRAP")
		return "", err
	}, err
}

func torchrunEnv(e envReader) (Info, func() (string, error), error) {
	i, err := e.ranks("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
	i.Source = "torchrun"
	i.HostRoot = i.Rank == 0
	return i, func() (string, error) {
		host, err := e.str("MASTER_ADDR")
		if err != nil {
			return "", err
		}
		port, err := e.port("MASTER_PORT")
		if err != nil {
			return "", err
		}
		if v, _ := e.lookup("TORCHELASTIC_USE_AGENT_STORE"); v == "True" || v == "true" || v == "1" {
			// torchrun's own store listens on MASTER_PORT.
			if port == 65535 {
				return "", fmt.Errorf("bootstrap: MASTER_PORT=65535 leaves no port next to torchrun's store; set GOCCL_BOOTSTRAP")
			}
			port++
		}
		return net.JoinHostPort(host, strconv.Itoa(port)), nil
	}, err
}

func ompiEnv(e envReader) (Info, func() (string, error), error) {
	i, err := e.ranks("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")
	i.Source = "ompi"
	i.HostRoot = i.Rank == 0
	return i, func() (string, error) {
		host, _, ok := e.first("MASTER_ADDR")
		if !ok {
			if i.LocalSize != i.Size {
				return "", fmt.Errorf("bootstrap: Open MPI ranks span several hosts (OMPI_COMM_WORLD_LOCAL_SIZE=%d < OMPI_COMM_WORLD_SIZE=%d): set MASTER_ADDR to rank 0's host, or GOCCL_BOOTSTRAP", i.LocalSize, i.Size)
			}
			host = "127.0.0.1"
		}
		port, err := portOrDerived(e, "PMIX_NAMESPACE")
		if err != nil {
			return "", err
		}
		return net.JoinHostPort(host, strconv.Itoa(port)), nil
	}, err
}

// portOrDerived reads MASTER_PORT, or derives a port from the job id
// variables (all of which must be set).
func portOrDerived(e envReader, idVars ...string) (int, error) {
	if e.has("MASTER_PORT") {
		return e.port("MASTER_PORT")
	}
	id := ""
	for _, n := range idVars {
		v, err := e.str(n)
		if err != nil {
			return 0, fmt.Errorf("%w (needed to derive the store port; or set MASTER_PORT or GOCCL_BOOTSTRAP)", err)
		}
		id += v + "."
	}
	return derivePort(id), nil
}

func slurmEnv(e envReader) (Info, func() (string, error), error) {
	var i Info
	var err error
	i.Source = "slurm"
	if i.Rank, err = e.int("SLURM_PROCID", 0); err != nil {
		return i, nil, err
	}
	if i.Size, err = e.int("SLURM_NTASKS", 1); err != nil {
		return i, nil, err
	}
	if i.LocalRank, err = e.int("SLURM_LOCALID", 0); err != nil {
		return i, nil, err
	}
	i.HostRoot = i.Rank == 0
	tpn, name, ok := e.first("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
	if !ok {
		return i, nil, fmt.Errorf("bootstrap: SLURM_TASKS_PER_NODE is not set")
	}
	counts, err := parseTasksPerNode(tpn)
	if err != nil {
		return i, nil, fmt.Errorf("bootstrap: %s=%q: %v", name, tpn, err)
	}
	node := 0
	if len(counts) > 1 || e.has("SLURM_NODEID") {
		if node, err = e.int("SLURM_NODEID", 0); err != nil {
			return i, nil, err
		}
		if node >= len(counts) {
			return i, nil, fmt.Errorf("bootstrap: SLURM_NODEID=%d but %s=%q lists %d nodes", node, name, tpn, len(counts))
		}
	}
	i.LocalSize = counts[node]
	return i, func() (string, error) {
		host, _, ok := e.first("MASTER_ADDR")
		if !ok {
			list, lname, ok := e.first("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
			if !ok {
				return "", fmt.Errorf("bootstrap: SLURM_STEP_NODELIST is not set (or set MASTER_ADDR or GOCCL_BOOTSTRAP)")
			}
			hosts, err := expandHostlist(list)
			if err != nil {
				return "", fmt.Errorf("bootstrap: %s: %v", lname, err)
			}
			host = hosts[0]
		}
		port, err := portOrDerived(e, "SLURM_JOB_ID", "SLURM_STEP_ID")
		if err != nil {
			return "", err
		}
		return net.JoinHostPort(host, strconv.Itoa(port)), nil
	}, nil
}
