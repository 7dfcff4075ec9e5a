package main

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Binding ranks to cores (mpirun's --bind-to core, its default for small
// jobs): the ranks of this host get disjoint blocks of the CPUs gorun may
// use, so that the scheduler does not put two ranks that spin while they
// wait on one core while the other idles. Measured here (2 cores, 2 ranks,
// 8-byte allreduce over TCP): unbound, the ranks' threads shared a core
// from time to time and the p99 was 100-150 µs for a p50 of 13 µs; bound,
// the p99 halved and the mean fell from 16-18 µs to 14 µs. A Go program
// sets GOMAXPROCS from the CPUs it may use, so a rank bound to k CPUs runs
// k goroutines at once.
//
// With more ranks than CPUs, auto binds each rank to one CPU, round robin
// (rank i and rank i+len(cpus) share a CPU), so that the ranks sharing a
// core take turns on it instead of migrating. Measured here (4 ranks on 2
// cores, 8-byte to 64 KiB allreduce, 2 runs each): over shared memory
// unbound runs had sizes at 23 us among 10 us ones (three ranks crowded on
// one core for a while), bound ones stayed at 9.8-10 us; over TCP 115-190
// us unbound against 129-152 us bound.

// startMu serialises starts that change the starting thread's affinity.
var startMu sync.Mutex

// withAffinity runs start (which forks the rank) on a thread whose CPU
// affinity is cpus, so that the rank inherits it, and restores the
// thread's affinity afterwards. With no cpus it just runs start.
func withAffinity(cpus []int, start func() error) error {
	if len(cpus) == 0 {
		return start()
	}
	startMu.Lock()
	defer startMu.Unlock()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return start()
	}
	for _, c := range cpus {
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("bind to CPUs %v: %w", cpus, err)
	}
	err := start()
	_ = unix.SchedSetaffinity(0, &old) // it was allowed a moment ago
	return err
}

// cpuList formats cpus as "0-3,6".
func cpuList(cpus []int) string {
	cpus = slices.Clone(cpus)
	slices.Sort(cpus)
	s := ""
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if s != "" {
			s += ","
		}
		if j == i {
			s += fmt.Sprint(cpus[i])
		} else {
			s += fmt.Sprintf("%d-%d", cpus[i], cpus[j])
		}
		i = j + 1
	}
	return s
}

// hasVar reports whether env sets name.
func hasVar(env []string, name string) bool {
	for _, e := range env {
		if k, _, _ := strings.Cut(e, "="); k == name {
			return true
		}
	}
	return false
}

// exported reports whether -x names name.
func exported(exports []kv, name string) bool {
	for _, e := range exports {
		if e.k == name {
			return true
		}
	}
	return false
}
