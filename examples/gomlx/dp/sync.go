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
	}
	if err := comm.Broadcast(ctx, c, buf, 0); err != nil {
		return fmt.Errorf("broadcasting %d variables (%d bytes) from rank 0: %w", len(vars), total, err)
	}
	if c.Rank() == 0 {
		return nil
	}
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
