package comm

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/goccl/goccl/bootstrap"
	"github.com/goccl/goccl/collectives"
)

// When a collective fails, the rank that failed publishes a short report in
// the bootstrap store (once per communicator): the call it was in, and the
// rank it found at the root of the failure. Ranks that failed only because
// a neighbour dropped its connections read that neighbour's report, so that
// every survivor's error names the rank that really died or mismatched, not
// just the neighbour it lost.

// keyValue is the part of the bootstrap store a communicator uses for these
// reports.
type keyValue interface {
	Set(ctx context.Context, key string, value []byte) error
	Get(ctx context.Context, key string) ([]byte, error)
}

func kvOf(r Rendezvous) keyValue {
	switch v := r.(type) {
	case keyValue:
		return v
	case interface{ Client() *bootstrap.Client }:
		return v.Client()
	}
	return nil
}

const (
	// mismatchWait bounds the wait for the peer's call after a mismatch.
	mismatchWait = 3 * time.Second
	// deadWait is how long a rank whose peer's connection broke waits for
	// that peer's report before concluding the peer itself failed.
	deadWait = 500 * time.Millisecond
	// chainWait bounds the wait for a report that is itself waiting on
	// another rank's (failures cascade through dropped connections).
	chainWait = 3 * time.Second
)

// report is what a failed rank publishes.
type report struct {
	root     int    // the rank at the root of the failure, -1 if none (mismatch, timeout)
	mismatch bool   // the rank found a collective mismatch
	call     string // the call the rank was in, e.g. "allreduce(float32, 8, sum) #3"
	cause    string
}

func (r report) encode() []byte {
	return fmt.Appendf(nil, "%d\n%t\n%s\n%s", r.root, r.mismatch, r.call, r.cause)
}

func decodeReport(b []byte) (report, bool) {
	parts := strings.SplitN(string(b), "\n", 4)
	if len(parts) != 4 {
		return report{}, false
	}
	root, err1 := strconv.Atoi(parts[0])
	mm, err2 := strconv.ParseBool(parts[1])
	if err1 != nil || err2 != nil {
		return report{}, false
	}
	return report{root: root, mismatch: mm, call: parts[2], cause: parts[3]}, true
}

func (c *Comm) reportKey(rank int) string { return fmt.Sprintf("goccl/%s/report/%d", c.id, rank) }

func (c *Comm) readReport(kv keyValue, rank int, wait time.Duration) (report, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	v, err := kv.Get(ctx, c.reportKey(rank))
	if err != nil {
		return report{}, false
	}
	return decodeReport(v)
}

// markPending says, before this rank looks for the cause of its failure,
// that it is alive and will publish a report.
func (c *Comm) markPending(kv keyValue) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	kv.Set(ctx, c.reportKey(c.rank)+"/pending", []byte{1})
}

func (c *Comm) isPending(kv keyValue, rank int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
	defer cancel()
	_, err := kv.Get(ctx, c.reportKey(rank)+"/pending")
	return err == nil
}

func (c *Comm) publish(kv keyValue, r report) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	kv.Set(ctx, c.reportKey(c.rank), r.encode())
}

// explain turns the executor's error into the one the user sees, and
// publishes this rank's report. desc names the failed call.
func (c *Comm) explain(err error, desc string) error {
	var mm *collectives.MismatchError
	var pe *collectives.PeerError
	kv := kvOf(c.rdv)
	if kv == nil {
		return err
	}
	call := fmt.Sprintf("%s #%d", desc, c.seq)
	switch {
	case errors.As(err, &mm):
		c.publish(kv, report{root: -1, mismatch: true, call: call, cause: "collective mismatch"})
		if r, ok := c.readReport(kv, mm.Peer, mismatchWait); ok {
			mm.PeerCall = r.call
		}
		return err
	case errors.As(err, &pe):
		// Either the peer failed itself (it died, its link broke: no
		// report comes), or it dropped its connections because of a
		// failure further away, which its report names.
		c.markPending(kv)
		r, ok := c.readReport(kv, pe.Peer, deadWait)
		if !ok && c.isPending(kv, pe.Peer) {
			// The peer is alive and still finding out: wait for it.
			r, ok = c.readReport(kv, pe.Peer, chainWait)
		}
		if ok && r.root == -1 && !r.mismatch {
			// The peer failed on its own account (timeout): it is the root.
			ok, r.root = true, pe.Peer
		}
		if !ok {
			c.publish(kv, report{root: pe.Peer, call: call, cause: err.Error()})
			return fmt.Errorf("rank %d failed or lost its connection: %w", pe.Peer, err)
		}
		if r.mismatch {
			c.publish(kv, report{root: -1, mismatch: true, call: call, cause: "collective mismatch"})
			return fmt.Errorf("collective mismatch: rank %d called %s while rank %d called %s (%w)", pe.Peer, r.call, c.rank, call, err)
		}
		c.publish(kv, report{root: r.root, call: call, cause: r.cause})
		if r.root == c.rank {
			return err
		}
		return fmt.Errorf("rank %d failed or lost its connection (reported by rank %d: %s): %w", r.root, pe.Peer, r.cause, err)
	default:
		c.publish(kv, report{root: -1, call: call, cause: err.Error()})
		return err
	}
}
