// Package affinity splits a host's CPUs among the ranks of a job and binds
// a process to its share: gorun binds the ranks it starts itself (their
// threads inherit the CPUs of the thread that forks them), and a rank that
// gorun starts over ssh binds itself from GOCCL_BIND (comm.Init), as
// mpirun's daemon binds the ranks it starts on other hosts.
package affinity

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Modes are the binding modes: auto (bind, one CPU per rank round robin
// when the ranks outnumber the CPUs), core (bind; more ranks than CPUs is
// an error) and none.
var Modes = []string{"auto", "core", "none"}

// Blocks splits cpus into localSize disjoint blocks of equal size, one
// per local rank, or returns nil when the ranks are not bound (mode
// none). With more local ranks than CPUs, mode auto gives each rank one
// CPU, round robin (rank i and rank i+len(cpus) share a CPU: they take
// turns on it instead of migrating), and mode core is an error (mpirun
// refuses the same).
func Blocks(mode string, cpus []int, localSize int) ([][]int, error) {
	if mode == "none" || localSize <= 0 || len(cpus) == 0 {
		return nil, nil
	}
	if localSize > len(cpus) {
		if mode == "core" {
			return nil, fmt.Errorf("--bind-to core: %d ranks on this host and %d CPUs to bind them to (use --bind-to none)", localSize, len(cpus))
		}
		blocks := make([][]int, localSize)
		for i := range blocks {
			blocks[i] = cpus[i%len(cpus) : i%len(cpus)+1]
		}
		return blocks, nil
	}
	per := len(cpus) / localSize
	blocks := make([][]int, localSize)
	for i := range blocks {
		blocks[i] = cpus[i*per : (i+1)*per]
	}
	return blocks, nil
}

// Usable lists the CPUs the calling thread may run on.
func Usable() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, err
	}
	var cpus []int
	for i := 0; len(cpus) < set.Count() && i < 1<<16; i++ {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	return cpus, nil
}

// BindProcess binds every thread of this process to cpus (threads made
// later inherit it from the thread that makes them).
func BindProcess(cpus []int) error {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH {
			return fmt.Errorf("bind thread %d to CPUs %v: %w", tid, cpus, err)
		}
	}
	return nil
}
