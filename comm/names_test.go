package comm_test

import (
	"context"
	"strings"
	"testing"

	. "github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/transport/mem"
)

var canonical = []string{"allreduce", "broadcast", "reduce", "allgather", "allgatherv", "reduce-scatter",
	"alltoall", "alltoallv", "gather", "scatter", "barrier", "send", "recv", "sendrecv"}

// TestCanonicalNames checks that each collective has one spelling
// everywhere (issue 11 item 14d: bcast/broadcast and
// reduce-scatter/reduce_scatter/reducescatter were all in use): Algorithms
// knows the canonical names only, Algorithm and GOCCL_ALGO refuse other
// spellings with an error naming the canonical one, and errors use it.
func TestCanonicalNames(t *testing.T) {
	for _, name := range canonical {
		if len(Algorithms(name)) == 0 {
			t.Errorf("Algorithms(%q) is empty", name)
		}
	}
	others := map[string]string{"bcast": "broadcast", "reduce_scatter": "reduce-scatter", "reducescatter": "reduce-scatter",
		"ReduceScatter": "reduce-scatter", "all-reduce": "allreduce", "AllToAllV": "alltoallv", "send_recv": "sendrecv"}
	for other := range others {
		if a := Algorithms(other); a != nil {
			t.Errorf("Algorithms(%q) = %v, want nil (not the canonical name)", other, a)
		}
	}
	runRanks(t, 2, testOpts, func(c *Comm) error {
		for other, want := range others {
			if _, err := c.Algorithm(other, TypeFloat32, 1024); err == nil || !strings.Contains(err.Error(), `"`+want+`"`) {
				t.Errorf("Algorithm(%q): %v, want an error naming %q", other, err, want)
			}
		}
		if _, err := c.Algorithm("allreduc", TypeFloat32, 1024); err == nil || !strings.Contains(err.Error(), "reduce-scatter") {
			t.Errorf("Algorithm of an unknown collective: %v, want the list of names", err)
		}
		err := ReduceScatter(context.Background(), c, make([]float32, 3), make([]float32, 2), Sum)
		if err == nil || !strings.Contains(err.Error(), "reduce-scatter(float32)") {
			t.Errorf("a bad reduce-scatter: %v, want it named reduce-scatter", err)
		}
		return nil
	})
	newComm := func() error {
		c, err := New(context.Background(), NewLocalGroup(1).Member(0), mem.NewNetwork(mem.Options{}).NewDevice(), Options{OwnDevice: true})
		if err == nil {
			c.Close()
		}
		return err
	}
	t.Setenv("GOCCL_ALGO", "allreduce:ring,bcast:pipeline")
	if err := newComm(); err == nil || !strings.Contains(err.Error(), `"broadcast"`) {
		t.Errorf("GOCCL_ALGO with bcast: %v, want an error naming broadcast", err)
	}
	t.Setenv("GOCCL_ALGO", "allreduce:ring,broadcast:pipeline,reduce-scatter:ring,sendrecv:direct")
	if err := newComm(); err != nil {
		t.Errorf("GOCCL_ALGO with canonical names: %v", err)
	}
}

// TestAlgorithmPricesHalfTypes checks that Comm.Algorithm prices
// reductions of float16 and bfloat16 as the float32 collective they run as
// (issue 11 item 14g), so that it names the algorithm the call really
// uses, at sizes where the float32 price of the same bytes would pick
// another.
func TestAlgorithmPricesHalfTypes(t *testing.T) {
	opts := testOpts
	opts.Alpha, opts.Beta = 20e-6, 1e-9 // a fixed cost model
	runRanks(t, 3, opts, func(c *Comm) error {
		ctx := context.Background()
		differ := 0
		for n := 64; n <= 4<<20; n *= 2 {
			for _, coll := range []string{"allreduce", "reduce-scatter", "broadcast"} {
				for _, dt := range []DataType{TypeFloat16, TypeBFloat16} {
					half, err := c.Algorithm(coll, dt, n)
					if err != nil {
						return err
					}
					wide, err := c.Algorithm(coll, TypeFloat32, 2*n)
					if err != nil {
						return err
					}
					same, err := c.Algorithm(coll, TypeFloat32, n)
					if err != nil {
						return err
					}
					reduces := coll != "broadcast"
					if reduces && half != wide || !reduces && half != same {
						t.Errorf("%s of %d bytes of %s priced as %s", coll, n, dt, half)
					}
					if !reduces || half == same || coll != "allreduce" {
						continue
					}
					// A size where the price matters: the call must agree.
					differ++
					buf := make([]Float16, n/2)
					r := AllreduceAsync(c, buf, buf, Sum)
					if err := r.Wait(ctx); err != nil {
						return err
					}
					if r.Algorithm() != half {
						t.Errorf("allreduce of %d bytes of float16 ran %s, Algorithm says %s", n, r.Algorithm(), half)
					}
				}
			}
		}
		if differ == 0 {
			t.Error("no size where float16 and float32 of the same bytes pick different algorithms: the test checks nothing")
		}
		return nil
	})
}
