package comm

import (
	"context"
	"slices"
	"time"
)

// The selector's cost model needs α (seconds per message step) and β
// (seconds per byte) of the transport in use. tune measures them once, at
// New: α from dissemination barriers (ceil(log2 n) message steps each), β
// from ring allreduces of tuneBytes (2(n-1) steps moving 2(n-1)/n of the
// buffer). Rank 0's figures are broadcast, so every rank prices calls
// alike and picks the same algorithm.

const (
	tuneBytes    = 2 << 20
	tuneBarriers = 20
	tuneReduces  = 3
)

func (c *Comm) tune(ctx context.Context) error {
	if c.opts.Alpha > 0 && c.opts.Beta > 0 {
		c.alpha, c.beta = c.opts.Alpha, c.opts.Beta
		return nil
	}
	// Safe defaults while measuring (the measurements force their
	// algorithms anyway).
	c.alpha, c.beta = 20e-6, 1/2e9
	if c.size == 1 {
		return nil
	}
	steps := 0
	for d := 1; d < c.size; d <<= 1 {
		steps++
	}
	var lat []float64
	for i := range tuneBarriers + 3 {
		start := time.Now()
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if i >= 3 {
			lat = append(lat, time.Since(start).Seconds()/float64(steps))
		}
	}
	alpha := median(lat)
	buf, err := Alloc[float32](c, tuneBytes/4)
	if err != nil {
		return err
	}
	defer Free(c, buf)
	var bw []float64
	ring := WithAlgorithm("ring")
	for i := range tuneReduces + 1 {
		start := time.Now()
		if err := Allreduce(ctx, c, buf, buf, Max, ring); err != nil {
			return err
		}
		if i >= 1 {
			t := time.Since(start).Seconds() - 2*float64(c.size-1)*alpha
			bytes := 2 * float64(c.size-1) / float64(c.size) * tuneBytes
			bw = append(bw, max(t, 1e-9)/bytes)
		}
	}
	agreed := []float64{alpha, median(bw)}
	if err := Broadcast(ctx, c, agreed, 0); err != nil {
		return err
	}
	c.alpha, c.beta = agreed[0], agreed[1]
	if c.debug {
		c.debugf("cost model: α=%.1fus β=%.3fns/B (%.2f GB/s) measured on %s", c.alpha*1e6, c.beta*1e9, 1/c.beta/1e9, c.dev.Name())
	}
	return nil
}

// CostModel returns the α (seconds per message step) and β (seconds per
// byte) the communicator's algorithm selector uses.
func (c *Comm) CostModel() (alpha, beta float64) { return c.alpha, c.beta }

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
