package collectives

import (
	"fmt"
	"github.com/goccl/goccl/internal/racetest"
	"testing"
)

// hostLayouts are the placements the hierarchical schedules are checked
// on: ranks in blocks, interleaved, hosts of unequal size, one rank per
// host, one host.
func hostLayouts() []struct {
	name  string
	hosts []int
} {
	return []struct {
		name  string
		hosts []int
	}{
		{"2x2", []int{0, 0, 1, 1}},
		{"2x3", []int{0, 0, 0, 1, 1, 1}},
		{"3x2-interleaved", []int{7, 8, 9, 7, 8, 9}},
		{"3x3", []int{0, 0, 0, 1, 1, 1, 2, 2, 2}},
		{"4x2", []int{0, 0, 1, 1, 2, 2, 3, 3}},
		{"uneven-3+1+2", []int{0, 0, 0, 1, 2, 2}},
		{"1-per-host", []int{0, 1, 2, 3, 4}},
		{"one-host", []int{5, 5, 5, 5}},
		{"5x2", []int{0, 0, 1, 1, 2, 2, 3, 3, 4, 4}},
	}
}

// TestHierAllreduceSchedules runs the hierarchical allreduces through the
// expression simulator on every layout: every element reduced over every
// rank exactly once, the same bits on every rank.
func TestHierAllreduceSchedules(t *testing.T) {
	racetest.SkipSequential(t)
	for _, name := range []string{"hier-ring", "hier-leader"} {
		a, err := LookupAlgo(CollAllreduce, name)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, l := range hostLayouts() {
				size := len(l.hosts)
				for _, count := range reduceCounts {
					args := Args{Count: count, ElemSize: 4, Hosts: l.hosts}
					runX(t, fmt.Sprintf("%s count=%d", l.name, count),
						allreduceCase(size, count, func(r int) Schedule { return a.Build(r, size, &args) }))
				}
			}
		})
	}
}

// TestHierGroups pins the host grouping: hosts in order of their lowest
// rank, ranks in rank order within a host.
func TestHierGroups(t *testing.T) {
	groups, hostOf, localOf := hostGroups(6, []int{9, 4, 9, 4, 1, 9})
	want := [][]int{{0, 2, 5}, {1, 3}, {4}}
	if fmt.Sprint(groups) != fmt.Sprint(want) {
		t.Fatalf("groups %v, want %v", groups, want)
	}
	if fmt.Sprint(hostOf) != "[0 1 0 1 2 0]" || fmt.Sprint(localOf) != "[0 0 1 1 0 2]" {
		t.Fatalf("hostOf %v localOf %v", hostOf, localOf)
	}
	if g, _, _ := hostGroups(3, nil); fmt.Sprint(g) != "[[0 1 2]]" {
		t.Fatalf("no hosts: %v, want one host", g)
	}
}

// TestHierSelection: on several hosts of several ranks, with a network
// much dearer than the local links, the selector prices the hierarchical
// algorithms and picks one of them; on one host, or one rank per host, they
// are no candidates.
func TestHierSelection(t *testing.T) {
	m := Model{Gamma: 1e-10, ChunkBytes: 512 << 10}
	m.Links[LinkLocal] = LinkCost{Alpha: 1e-6, Beta: 1 / 10e9}
	m.Links[LinkNet] = LinkCost{Alpha: 50e-6, Beta: 1 / 0.125e9}
	for _, c := range []struct {
		t     Topology
		bytes int
		want  string
	}{
		{Topology{Size: 8, Hosts: 2}, 8, "hier-leader"},
		{Topology{Size: 16, Hosts: 4}, 64 << 20, "hier-ring"},
		{Topology{Size: 7, Hosts: 2, Uneven: true}, 8, "hier-leader"},
	} {
		a, _, err := Select(CollAllreduce, c.bytes, c.t, m, nil)
		if err != nil {
			t.Fatal(err)
		}
		if a.Name != c.want {
			t.Errorf("%+v %d B: picked %s, want %s", c.t, c.bytes, a.Name, c.want)
		}
	}
	for _, top := range []Topology{{Size: 8, Hosts: 1}, {Size: 4, Hosts: 4}} {
		for _, name := range []string{"hier-ring", "hier-leader"} {
			a, _ := LookupAlgo(CollAllreduce, name)
			if _, ok := a.Time(1<<20, top, m); ok {
				t.Errorf("%s priced on %+v, where it does not apply", name, top)
			}
		}
	}
	// Broadcast: the hierarchical tree crosses the network ceil(log2 H)
	// times where the flat binomial tree may cross it ceil(log2 HL) times
	// (for large buffers the pipelined chain is cheaper still).
	for _, c := range []struct {
		t     Topology
		bytes int
	}{{Topology{Size: 8, Hosts: 2}, 8}, {Topology{Size: 16, Hosts: 4}, 64 << 10}} {
		a, _, err := Select(CollBroadcast, c.bytes, c.t, m, nil)
		if err != nil {
			t.Fatal(err)
		}
		if a.Name != "hier" {
			t.Errorf("broadcast %+v %d B: picked %s, want hier", c.t, c.bytes, a.Name)
		}
	}
	if hb, _ := LookupAlgo(CollBroadcast, "hier"); hb != nil {
		if _, ok := hb.Time(1<<20, Topology{Size: 8, Hosts: 1}, m); ok {
			t.Error("hier broadcast priced on one host")
		}
	}
	ring, _ := LookupAlgo(CollAllreduce, "hier-ring")
	if _, ok := ring.Time(1<<20, Topology{Size: 7, Hosts: 2, Uneven: true}, m); ok {
		t.Error("hier-ring priced on hosts of unequal rank counts")
	}
}
