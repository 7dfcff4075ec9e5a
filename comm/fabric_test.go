package comm_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	. "github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/comm/commtest"
)

// Peers on this host are reached over shared memory, the others over the
// network, and the communicator says which is which.
func TestTransportPerPeer(t *testing.T) {
	runRanksOn(t, "hosts", 5, testOpts, func(c *Comm) error {
		// Ranks 0-2 on one host, 3-4 on the other.
		local := func(p int) bool { return (p < 3) == (c.Rank() < 3) }
		for p := range c.Size() {
			want := "tcp"
			switch {
			case p == c.Rank():
				want = "self"
			case local(p):
				want = "shm"
			}
			if got := c.PeerTransport(p); got != want {
				return fmt.Errorf("PeerTransport(%d) = %q, want %q", p, got, want)
			}
		}
		if c.Transport() != "tcp+shm" {
			return fmt.Errorf("Transport() = %q, want tcp+shm", c.Transport())
		}
		want := map[int]string{0: "shm: ranks 1-2; tcp: ranks 3-4", 4: "shm: rank 3; tcp: ranks 0-2"}[c.Rank()]
		if got := c.Transports(); want != "" && got != want {
			return fmt.Errorf("Transports() = %q, want %q", got, want)
		}
		if c.Hosts() != 2 {
			return fmt.Errorf("%d hosts, want 2", c.Hosts())
		}
		ops := commtest.AllOps
		if raceEnabled {
			ops = []Op{Sum} // every operation: TestCollectivesOverShm
		}
		return commtest.CheckAll[float32](context.Background(), c, 3*c.Size()+1, ops)
	})
}

// Every collective and algorithm over shared memory alone, and over two
// hosts (shared memory within, the network between), on registered and
// plain buffers.
func TestCollectivesOverShm(t *testing.T) {
	for _, kind := range []string{"shm", "mem-hosts", "hosts"} {
		// Two and three ranks on one host; over two hosts, three ranks
		// (two on one host, one on the other: shared memory and the
		// network in one collective) and five (3+2).
		ranks := []int{2, 3, 5}
		if testing.Short() || raceEnabled {
			ranks = []int{2, 3}
			if kind != "shm" {
				ranks = []int{3}
			}
		}
		for _, n := range ranks {
			t.Run(fmt.Sprintf("%s/ranks=%d", kind, n), func(t *testing.T) {
				runRanksOn(t, kind, n, testOpts, func(c *Comm) error {
					ctx := context.Background()
					counts, registered := []int{0, 1, 13, 3*n + 1, 5000}, []int{13, 2000}
					if raceEnabled {
						// The race detector looks at who touches what:
						// empty, a few elements and the staged and
						// direct-copy paths of thousands show it.
						counts, registered = []int{0, 13, 5000}, []int{2000}
					}
					for _, count := range counts {
						if err := commtest.CheckAll[float32](ctx, c, count, commtest.AllOps); err != nil {
							return err
						}
					}
					for _, count := range registered {
						if err := commtest.CheckAllRegistered[float32](ctx, c, count, commtest.AllOps); err != nil {
							return err
						}
					}
					return commtest.CheckAll[int64](ctx, c, 7, commtest.AllOps)
				})
			})
		}
	}
}

func TestNewWithNeedsADevice(t *testing.T) {
	_, err := NewWith(context.Background(), NewLocalGroup(1).Member(0), Devices{}, Options{})
	require.ErrorContains(t, err, "no transport device")
}
