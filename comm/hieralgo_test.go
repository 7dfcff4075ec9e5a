package comm_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/comm/commtest"
)

// TestForcedHierRingOnUnevenHostsNamesHierLeader: hier-ring forced on
// hosts of unequal rank counts runs hier-leader's schedule
// (collectives.HierRingAllreduce), and the finished request says so,
// instead of the name that was asked for; on even hosts it runs and names
// hier-ring.
func TestForcedHierRingOnUnevenHostsNamesHierLeader(t *testing.T) {
	for _, c := range []struct {
		hosts []int
		want  string
	}{
		{[]int{0, 0, 1}, "hier-leader"},
		{[]int{0, 1, 1, 1}, "hier-leader"},
		{[]int{0, 0, 1, 1}, "hier-ring"},
	} {
		t.Run(fmt.Sprint(c.hosts), func(t *testing.T) {
			runRanksOnHosts(t, c.hosts, testOpts, func(comm *Comm) error {
				buf := []float32{1, 2, 3}
				r := AllreduceAsync(comm, buf, buf, Sum, WithAlgorithm("hier-ring"))
				if err := r.Wait(context.Background()); err != nil {
					return err
				}
				if n := float32(len(c.hosts)); buf[0] != n || buf[2] != 3*n {
					return fmt.Errorf("result %v", buf)
				}
				if got := r.Algorithm(); got != c.want {
					return fmt.Errorf("hier-ring forced on hosts %v: the request says it ran %q, want %q", c.hosts, got, c.want)
				}
				return nil
			})
			// Forced for the communicator: Comm.Algorithm names what a
			// call would run, as the request does.
			o := testOpts
			o.Algorithms = "allreduce:hier-ring"
			runRanksOnHosts(t, c.hosts, o, func(comm *Comm) error {
				if got, err := comm.Algorithm("allreduce", TypeFloat32, 12); err != nil || got != c.want {
					return fmt.Errorf("Comm.Algorithm with hier-ring forced on hosts %v: %q, %v, want %q", c.hosts, got, err, c.want)
				}
				return nil
			})
		})
	}
}

// runRanksOnHosts runs f on len(hosts) ranks, goroutines of this process,
// rank r on host hosts[r]: in-memory links stand for shared memory within
// a host and for the network between hosts (commtest's "mem-hosts", with
// any layout).
func runRanksOnHosts(t *testing.T, hosts []int, opts Options, f func(c *Comm) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for r, err := range commtest.RunOnHosts(ctx, "mem-hosts", hosts, opts, f) {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
