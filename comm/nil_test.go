package comm_test

import (
	"context"
	"errors"
	"testing"

	. "github.com/goccl/goccl/comm"
)

// TestNilCommAndRequest calls everything on a nil *Comm (what Split gives
// a rank of negative color), a nil *Request and a nil *Persistent: errors,
// never a panic (issue 11 item 11).
func TestNilCommAndRequest(t *testing.T) {
	ctx := context.Background()
	var c *Comm
	b := []float32{1, 2}
	raw := make([]byte, 8)
	f32 := TypeFloat32
	calls := map[string]func() error{
		"Allreduce":               func() error { return Allreduce(ctx, c, b, b, Sum) },
		"AllreduceAsync":          func() error { return AllreduceAsync(c, b, b, Sum).Wait(ctx) },
		"AllreduceBytes":          func() error { return c.AllreduceBytes(ctx, raw, raw, f32, Sum) },
		"AllreduceBytesAsync":     func() error { return c.AllreduceBytesAsync(raw, raw, f32, Sum).Wait(ctx) },
		"Broadcast":               func() error { return Broadcast(ctx, c, b, 0) },
		"BroadcastAsync":          func() error { return BroadcastAsync(c, b, 0).Wait(ctx) },
		"BroadcastBytes":          func() error { return c.BroadcastBytes(ctx, raw, f32, 0) },
		"BroadcastBytesAsync":     func() error { return c.BroadcastBytesAsync(raw, f32, 0).Wait(ctx) },
		"Reduce":                  func() error { return Reduce(ctx, c, b, b, Sum, 0) },
		"ReduceAsync":             func() error { return ReduceAsync(c, b, b, Sum, 0).Wait(ctx) },
		"ReduceBytes":             func() error { return c.ReduceBytes(ctx, raw, raw, f32, Sum, 0) },
		"ReduceBytesAsync":        func() error { return c.ReduceBytesAsync(raw, raw, f32, Sum, 0).Wait(ctx) },
		"Allgather":               func() error { return Allgather(ctx, c, b, b) },
		"AllgatherAsync":          func() error { return AllgatherAsync(c, b, b).Wait(ctx) },
		"AllgatherBytes":          func() error { return c.AllgatherBytes(ctx, raw, raw, f32) },
		"AllgatherBytesAsync":     func() error { return c.AllgatherBytesAsync(raw, raw, f32).Wait(ctx) },
		"Allgatherv":              func() error { return Allgatherv(ctx, c, b, b, []int{2}, nil) },
		"AllgathervAsync":         func() error { return AllgathervAsync(c, b, b, []int{2}, nil).Wait(ctx) },
		"AllgathervBytes":         func() error { return c.AllgathervBytes(ctx, raw, raw, f32, []int{2}, nil) },
		"AllgathervBytesAsync":    func() error { return c.AllgathervBytesAsync(raw, raw, f32, []int{2}, nil).Wait(ctx) },
		"ReduceScatter":           func() error { return ReduceScatter(ctx, c, b, b, Sum) },
		"ReduceScatterAsync":      func() error { return ReduceScatterAsync(c, b, b, Sum).Wait(ctx) },
		"ReduceScatterBytes":      func() error { return c.ReduceScatterBytes(ctx, raw, raw, f32, Sum) },
		"ReduceScatterBytesAsync": func() error { return c.ReduceScatterBytesAsync(raw, raw, f32, Sum).Wait(ctx) },
		"Alltoall":                func() error { return Alltoall(ctx, c, b, b) },
		"AlltoallAsync":           func() error { return AlltoallAsync(c, b, b).Wait(ctx) },
		"AlltoallBytes":           func() error { return c.AlltoallBytes(ctx, raw, raw, f32) },
		"AlltoallBytesAsync":      func() error { return c.AlltoallBytesAsync(raw, raw, f32).Wait(ctx) },
		"Alltoallv":               func() error { return Alltoallv(ctx, c, b, []int{2}, nil, b, []int{2}, nil) },
		"AlltoallvAsync":          func() error { return AlltoallvAsync(c, b, []int{2}, nil, b, []int{2}, nil).Wait(ctx) },
		"AlltoallvBytes":          func() error { return c.AlltoallvBytes(ctx, raw, []int{2}, nil, raw, []int{2}, nil, f32) },
		"AlltoallvBytesAsync":     func() error { return c.AlltoallvBytesAsync(raw, []int{2}, nil, raw, []int{2}, nil, f32).Wait(ctx) },
		"Gather":                  func() error { return Gather(ctx, c, b, b, 0) },
		"GatherAsync":             func() error { return GatherAsync(c, b, b, 0).Wait(ctx) },
		"GatherBytes":             func() error { return c.GatherBytes(ctx, raw, raw, f32, 0) },
		"GatherBytesAsync":        func() error { return c.GatherBytesAsync(raw, raw, f32, 0).Wait(ctx) },
		"Scatter":                 func() error { return Scatter(ctx, c, b, b, 0) },
		"ScatterAsync":            func() error { return ScatterAsync(c, b, b, 0).Wait(ctx) },
		"ScatterBytes":            func() error { return c.ScatterBytes(ctx, raw, raw, f32, 0) },
		"ScatterBytesAsync":       func() error { return c.ScatterBytesAsync(raw, raw, f32, 0).Wait(ctx) },
		"Barrier":                 func() error { return c.Barrier(ctx) },
		"BarrierAsync":            func() error { return c.BarrierAsync().Wait(ctx) },
		"Send":                    func() error { return Send(ctx, c, b, 0, 0) },
		"SendAsync":               func() error { return SendAsync(c, b, 0, 0).Wait(ctx) },
		"SendBytes":               func() error { return c.SendBytes(ctx, raw, f32, 0, 0) },
		"SendBytesAsync":          func() error { return c.SendBytesAsync(raw, f32, 0, 0).Wait(ctx) },
		"Recv":                    func() error { return Recv(ctx, c, b, 0, 0) },
		"RecvAsync":               func() error { return RecvAsync(c, b, 0, 0).Wait(ctx) },
		"RecvBytes":               func() error { return c.RecvBytes(ctx, raw, f32, 0, 0) },
		"RecvBytesAsync":          func() error { return c.RecvBytesAsync(raw, f32, 0, 0).Wait(ctx) },
		"SendRecv":                func() error { return SendRecv(ctx, c, b, 0, b, 0, 0) },
		"SendRecvAsync":           func() error { return SendRecvAsync(c, b, 0, b, 0, 0).Wait(ctx) },
		"SendRecvBytes":           func() error { return c.SendRecvBytes(ctx, raw, 0, raw, 0, f32, 0) },
		"SendRecvBytesAsync":      func() error { return c.SendRecvBytesAsync(raw, 0, raw, 0, f32, 0).Wait(ctx) },
		"Alloc":                   func() error { _, err := Alloc[float32](c, 4); return err },
		"Free":                    func() error { return Free(c, b) },
		"Register":                func() error { return Register(c, b) },
		"Deregister":              func() error { return Deregister(c, b) },
		"Split":                   func() error { _, err := c.Split(ctx, 0, 0); return err },
		"SplitByHost":             func() error { _, err := c.SplitByHost(ctx, 0); return err },
		"Dup":                     func() error { _, err := c.Dup(ctx); return err },
		"Algorithm":               func() error { _, err := c.Algorithm("allreduce", f32, 8); return err },
		"AllreduceInit":           func() error { _, err := AllreduceInit(c, b, b, Sum); return err },
		"Scan":                    func() error { return Scan(ctx, c, b, b, Sum) },
		"ExscanAsync":             func() error { return ExscanAsync(c, b, b, Sum).Wait(ctx) },
		"ScanBytes":               func() error { return c.ScanBytes(ctx, raw, raw, f32, Sum) },
		"ExscanInit":              func() error { _, err := ExscanInit(c, b, b, Sum); return err },
	}
	for name, f := range calls {
		if err := f(); !errors.Is(err, ErrNilComm) {
			t.Errorf("%s on a nil *Comm: %v, want ErrNilComm", name, err)
		}
	}
	if c.Rank() != -1 || c.Size() != 0 || c.Transport() != "" {
		t.Errorf("nil *Comm: Rank %d, Size %d, Transport %q; want -1, 0, \"\"", c.Rank(), c.Size(), c.Transport())
	}
	if c.Host() != -1 || c.LocalRank() != -1 || c.LocalSize() != 0 || c.Hosts() != 0 {
		t.Errorf("nil *Comm: Host %d, LocalRank %d, LocalSize %d, Hosts %d; want -1, -1, 0, 0", c.Host(), c.LocalRank(), c.LocalSize(), c.Hosts())
	}
	if a, b := c.CostModel(); a != 0 || b != 0 {
		t.Errorf("nil *Comm: CostModel %v, %v", a, b)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close of a nil *Comm: %v", err)
	}
	c.Abort(nil)

	var r *Request
	if err := r.Wait(ctx); !errors.Is(err, ErrNilRequest) {
		t.Errorf("Wait on a nil *Request: %v", err)
	}
	if r.Algorithm() != "" {
		t.Error("Algorithm of a nil *Request is not empty")
	}
	if done, err := r.Test(); !done || !errors.Is(err, ErrNilRequest) {
		t.Errorf("Test on a nil *Request: %v, %v", done, err)
	}
	if err := WaitAll(ctx, r, nil); err != nil {
		t.Errorf("WaitAll of nil requests: %v", err)
	}
	var p *Persistent
	if p.Start() == nil || p.Wait(ctx) == nil {
		t.Error("Start and Wait of a nil *Persistent returned nil")
	}
	if done, err := p.Test(); !done || err == nil {
		t.Errorf("Test of a nil *Persistent: %v, %v", done, err)
	}
}
