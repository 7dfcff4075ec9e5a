package dp

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	mlctx "github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/goccl/goccl/comm"
)

// broadcastVariables makes every variable of ctx that has a value equal to
// rank 0's. The ranks first agree that they hold the same variables (scope,
// name, shape, in context order): every rank learns of a difference and
// returns an error naming it, none is left waiting. Then the values travel
// in one broadcast of a registered byte buffer.
func broadcastVariables(ctx context.Context, c *comm.Comm, mctx *mlctx.Context) error {
	var vars []*mlctx.Variable
	total := 0
	h := sha256.New()
	for v := range mctx.IterVariables() {
		if !v.HasValue() || v.Shape().Memory() == 0 {
			continue
		}
		if v.Scope() == mlctx.RootScope && v.Name() == mlctx.RNGStateVariableName {
			// Each rank's random generator is seeded apart after the
			// initial broadcast, and must stay so after a later one.
			continue
		}
		vars = append(vars, v)
		total += int(v.Shape().Memory())
		fmt.Fprintf(h, "%s %s\n", v.ScopeAndName(), v.Shape())
	}
	sum := h.Sum(nil)
	// Each rank contributes its fingerprint and its negation: the maximum
	// of both is (max, -min), equal only if every rank has the same one.
	fp := make([]int64, 8)
	for i := range 4 {
		w := int64(binary.LittleEndian.Uint64(sum[8*i:]) >> 1)
		fp[i], fp[4+i] = w, -w
	}
	if err := comm.Allreduce(ctx, c, fp, fp, comm.Max); err != nil {
		return fmt.Errorf("comparing the variables of the ranks: %w", err)
	}
	for i := range 4 {
		if fp[i] != -fp[4+i] {
			return fmt.Errorf("rank %d: the ranks do not hold the same variables (%d variables here; compare the model, its flags and the GoMLX version on every rank)", c.Rank(), len(vars))
		}
	}
	if total == 0 {
		return nil
	}
	buf, err := comm.Alloc[uint8](c, total)
	if err != nil {
		return fmt.Errorf("allocating %d bytes for the variables: %w", total, err)
	}
	defer comm.Free(c, buf)
	if c.Rank() == 0 {
		if err := packVariables(vars, buf); err != nil {
			return err
		}
	}
	if err := comm.Broadcast(ctx, c, buf, 0); err != nil {
		return fmt.Errorf("broadcasting %d variables (%d bytes) from rank 0: %w", len(vars), total, err)
	}
	if c.Rank() == 0 {
		return nil
	}
	return unpackVariables(vars, buf)
}

// packVariables copies the values of vars into buf, one after the other.
func packVariables(vars []*mlctx.Variable, buf []byte) error {
	off := 0
	for _, v := range vars {
		t, err := v.Value()
		if err != nil {
			return fmt.Errorf("variable %s: %w", v.ScopeAndName(), err)
		}
		if err := t.ConstBytes(func(b []byte) { off += copy(buf[off:], b) }); err != nil {
			return fmt.Errorf("variable %s: %w", v.ScopeAndName(), err)
		}
	}
	return nil
}

// unpackVariables sets the values of vars from buf, as packVariables
// laid them out.
func unpackVariables(vars []*mlctx.Variable, buf []byte) error {
	off := 0
	for _, v := range vars {
		t, err := v.Value()
		if err != nil {
			return fmt.Errorf("variable %s: %w", v.ScopeAndName(), err)
		}
		if err := t.MutableBytes(func(b []byte) { off += copy(b, buf[off:]) }); err != nil {
			return fmt.Errorf("variable %s: %w", v.ScopeAndName(), err)
		}
	}
	return nil
}

// buffers keeps the non-trainable variables that the gradient execution
// updates (batch normalization's moving mean and variance: PyTorch's
// buffers) equal on every rank. Each rank updates them from its own share
// of the batch, so they would drift apart; as PyTorch DDP with
// broadcast_buffers, rank 0's values are broadcast after every gradient
// execution, in one registered buffer with a persistent broadcast.
type buffers struct {
	c    *comm.Comm
	vars []*mlctx.Variable
	buf  []byte
	bc   *comm.Persistent
}

// newBuffers prepares the broadcast of vars (which have values); with no
// vars it does nothing.
func newBuffers(c *comm.Comm, vars []*mlctx.Variable) (*buffers, error) {
	b := &buffers{c: c, vars: vars}
	total := 0
	for _, v := range vars {
		total += int(v.Shape().Memory())
	}
	if total == 0 {
		return b, nil
	}
	var err error
	if b.buf, err = comm.Alloc[uint8](c, total); err != nil {
		return nil, fmt.Errorf("allocating %d bytes for the updated non-trainable variables: %w", total, err)
	}
	if b.bc, err = comm.BroadcastInit(c, b.buf, 0); err != nil {
		comm.Free(c, b.buf)
		return nil, fmt.Errorf("preparing the broadcast of the updated non-trainable variables: %w", err)
	}
	return b, nil
}

// sync sets every rank's variables to rank 0's values.
func (b *buffers) sync(ctx context.Context) error {
	if b.bc == nil {
		return nil
	}
	if b.c.Rank() == 0 {
		if err := packVariables(b.vars, b.buf); err != nil {
			return err
		}
	}
	if err := b.bc.Start(); err != nil {
		return err
	}
	if err := b.bc.Wait(ctx); err != nil {
		return err
	}
	if b.c.Rank() == 0 {
		return nil
	}
	return unpackVariables(b.vars, b.buf)
}

// free releases the registered buffer.
func (b *buffers) free() error {
	if b == nil || b.buf == nil {
		return nil
	}
	err := comm.Free(b.c, b.buf)
	b.buf = nil
	return err
}
