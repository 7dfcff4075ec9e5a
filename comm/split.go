package comm

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/goccl/goccl/bootstrap"
	"github.com/goccl/goccl/collectives"
)

// Split partitions the communicator as MPI_Comm_split does: ranks that
// pass the same color form a new communicator, ranked by key (ties by
// their rank here). A negative color (like MPI_UNDEFINED) joins none and
// gets a nil *Comm. Every rank of c must call Split, in the same order as
// its other collectives.
//
// The new communicator has its own connections (on the same transport
// device), its own sequence of collectives and its own failure reports, so
// its messages never mix with c's or a sibling's; c stays usable. Either
// may close first: the devices and the store they share close with the
// last of them (as MPI_Comm_free of a parent leaves its children).
func (c *Comm) Split(ctx context.Context, color, key int) (*Comm, error) {
	if err := c.usable("split"); err != nil {
		return nil, err
	}
	kv := kvOf(c.rdv)
	if kv == nil {
		return nil, fmt.Errorf("comm: split: rank %d: the communicator's rendezvous has no key-value store", c.rank)
	}
	mine := []int64{int64(color), int64(key)}
	all := make([]int64, 2*c.size)
	// Labelled, so that a rank calling Allgather of two int64 at this
	// turn is a mismatch, not a colour and key.
	r := c.newBlocking(ctx)
	r.label = "split"
	// Numbered by the call's run, in the communicator's order of calls:
	// splits made from several goroutines get the same names on every
	// rank.
	var n int
	r.splitNo = &n
	if err := c.allgather(r, asBytes(mine), asBytes(all), TypeInt64).wait(); err != nil {
		return nil, err // it names the call: "split(int64, 2) #N"
	}
	if color < 0 {
		return nil, nil
	}
	var members []int
	for r := range c.size {
		if all[2*r] == int64(color) {
			members = append(members, r)
		}
	}
	slices.SortStableFunc(members, func(a, b int) int {
		// Compared, not subtracted: keys span int64 (MinInt64-MaxInt64
		// overflowed and ordered the members wrongly).
		if o := cmp.Compare(all[2*a+1], all[2*b+1]); o != 0 {
			return o
		}
		return a - b
	})
	rank := slices.Index(members, c.rank)
	id := c.id + "/split" + strconv.Itoa(n) + "/color" + strconv.Itoa(color)
	rdv := &subRendezvous{kv: kv, id: id, rank: rank, size: len(members), gone: c.held.gone}
	rdv.lost = func(w int, why string) {
		// The parent's peers in a call learn it when this rank closes
		// the parent on the error (closeAfterFamilyFailure).
		ctx, cancel := context.WithTimeout(context.Background(), queryWait)
		defer cancel()
		c.familyFailed(ctx, kv, w, collectives.NoticeLost, fmt.Sprintf("rank %d failed: its process is gone (%s)", w, why))
	}
	for _, m := range members {
		rdv.world = append(rdv.world, c.worldRank(m))
	}
	opts := c.opts
	opts.Alpha, opts.Beta = c.alpha, c.beta // same transport: no need to measure again
	if c.selection.crowded && (opts.YieldWhenIdle == "" || opts.YieldWhenIdle == "auto") {
		opts.YieldWhenIdle = "1" // fewer ranks, the same crowded host
	}
	c.held.join()
	sub, err := newHeld(ctx, rdv, c.held, opts, id)
	if err != nil {
		return nil, fmt.Errorf("comm: split (color %d, key %d): rank %d: %w", color, key, c.rank, err)
	}
	sub.gamma = c.gamma
	sub.world = make([]int, len(members))
	for i, m := range members {
		sub.world[i] = c.worldRank(m)
	}
	sub.worldText = describeWorld(sub.id, sub.world)
	return sub, nil
}

// Dup returns a communicator of the same ranks in the same order, with
// its own connections and sequence of collectives (MPI_Comm_dup): a
// library can use it without its messages mixing with the caller's.
func (c *Comm) Dup(ctx context.Context) (*Comm, error) {
	return c.Split(ctx, 0, c.Rank())
}

// subRendezvous is a sub-communicator's rendezvous: its members meet
// through the parent's key-value store, under the sub-communicator's own
// key prefix, so siblings never see each other's keys.
type subRendezvous struct {
	kv         keyValue
	id         string
	rank, size int
	seq        int
	// gone and world: a member whose process is gone (holders.gone of
	// its world rank) fails the waits for it at once.
	gone  func(w int) string
	world []int
	// lost is told of a member found gone, by world rank (why: its gone
	// marker).
	lost func(w int, why string)
}

func (s *subRendezvous) Rank() int    { return s.rank }
func (s *subRendezvous) Size() int    { return s.size }
func (s *subRendezvous) Close() error { return nil }

func (s *subRendezvous) key(seq, rank int) string {
	return "goccl/" + s.id + "/ag/" + strconv.Itoa(seq) + "/" + strconv.Itoa(rank)
}

// Allgather publishes data and reads every member's.
func (s *subRendezvous) Allgather(ctx context.Context, data []byte) ([][]byte, error) {
	s.seq++
	if err := s.kv.Set(ctx, s.key(s.seq, s.rank), data); err != nil {
		return nil, err
	}
	out := make([][]byte, s.size)
	for r := range s.size {
		var v []byte
		var err error
		if s.gone == nil {
			v, err = s.kv.Get(ctx, s.key(s.seq, r))
		} else {
			var i int
			i, v, err = bootstrap.GetFirst(ctx, s.kv, s.key(s.seq, r), s.gone(s.world[r]))
			if i == 1 {
				if s.lost != nil {
					s.lost(s.world[r], string(v))
				}
				return nil, fmt.Errorf("sub-communicator %s: rank %d is gone: %s", s.id, r, v)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("sub-communicator %s: waiting for rank %d: %w", s.id, r, err)
		}
		out[r] = v
	}
	return out, nil
}

func (s *subRendezvous) Barrier(ctx context.Context) error {
	_, err := s.Allgather(ctx, nil)
	return err
}

// Set and Get let failure reports of the sub-communicator use the store.
func (s *subRendezvous) Set(ctx context.Context, key string, value []byte) error {
	return s.kv.Set(ctx, key, value)
}

func (s *subRendezvous) Get(ctx context.Context, key string) ([]byte, error) {
	return s.kv.Get(ctx, key)
}

// Delete removes keys, if the parent's store can.
func (s *subRendezvous) Delete(ctx context.Context, keys ...string) error {
	if d, ok := s.kv.(interface {
		Delete(context.Context, ...string) error
	}); ok {
		return d.Delete(ctx, keys...)
	}
	return nil
}

// worldRank is rank p's rank in the world.
func (c *Comm) worldRank(p int) int {
	if c.world == nil {
		return p
	}
	return c.world[p]
}

// describeWorld says where a sub-communicator's ranks are in the world,
// for its errors: "sub-communicator world/split1/color1, whose ranks 0-3
// are world ranks 1-7 step 2". Its ranks count up from 0, the world's
// are written as runs (a run of three or more with one step as
// "first-last step k").
func describeWorld(id string, world []int) string {
	identity := true
	for i, w := range world {
		identity = identity && i == w
	}
	if identity {
		return "sub-communicator " + id + ", whose ranks are the world's"
	}
	var parts []string
	for i := 0; i < len(world); {
		j := i + 1
		if j < len(world) {
			step := world[j] - world[i]
			for j+1 < len(world) && world[j+1]-world[j] == step {
				j++
			}
			if j-i >= 2 && step != 0 {
				run := fmt.Sprintf("%d-%d", world[i], world[j])
				if step != 1 {
					run += fmt.Sprintf(" step %d", step)
				}
				parts = append(parts, run)
				i = j + 1
				continue
			}
		}
		parts = append(parts, strconv.Itoa(world[i]))
		i++
	}
	ranks := "rank 0 is world rank "
	if len(world) > 1 {
		ranks = fmt.Sprintf("ranks 0-%d are world ranks ", len(world)-1)
	}
	return "sub-communicator " + id + ", whose " + ranks + strings.Join(parts, ", ")
}

// inSub names the sub-communicator, and where its ranks are in the world,
// in an error of its calls: the ranks an error names are the
// sub-communicator's, and the launcher's output is tagged with the
// world's. err itself in the world.
func (c *Comm) inSub(err error) error {
	if err == nil || c == nil || c.worldText == "" || strings.Contains(err.Error(), "["+c.worldText+"]") {
		return err // the communicator's sticky error may carry it already
	}
	return fmt.Errorf("%w [%s]", err, c.worldText)
}
