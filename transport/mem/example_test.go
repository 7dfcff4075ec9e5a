package mem_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/mem"
)

// Two ranks of one process exchange a message over an in-memory network.
func Example() {
	net := mem.NewNetwork(mem.Options{Seed: 1})
	d0, d1 := net.NewDevice(), net.NewDevice()
	defer d0.Close()
	defer d1.Close()
	cq0, _ := d0.NewCompletionQueue(16)
	cq1, _ := d1.NewCompletionQueue(16)
	e0, _ := d0.NewEndpoint(cq0)
	e1, _ := d1.NewEndpoint(cq1)

	// The address blobs would travel through bootstrap; here they are at hand.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e1.Connect(ctx, e0.LocalAddress()) }()
	if err := e0.Connect(ctx, e1.LocalAddress()); err != nil {
		fmt.Println(err)
		return
	}
	if err := <-done; err != nil {
		fmt.Println(err)
		return
	}

	src, _ := d0.Register([]byte("hello, rank 1"), 0)
	dst, _ := d1.Register(make([]byte, 64), transport.AccessLocalWrite)
	e1.PostRecv(1, dst, 0, 64)
	e0.PostSend(2, src, 0, len(src.Bytes()))

	var c [1]transport.Completion
	if _, err := cq1.Wait(ctx, c[:]); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%v %d: %q\n", c[0].Op, c[0].ID, dst.Bytes()[:c[0].Bytes])
	// Output: recv 1: "hello, rank 1"
}

// BenchmarkSendRecv measures a small message's round trip through a pair of
// endpoints, one request in flight.
func BenchmarkSendRecv(b *testing.B) {
	net := mem.NewNetwork(mem.Options{})
	d0, d1 := net.NewDevice(), net.NewDevice()
	defer d0.Close()
	defer d1.Close()
	cq0, _ := d0.NewCompletionQueue(16)
	cq1, _ := d1.NewCompletionQueue(16)
	e0, _ := d0.NewEndpoint(cq0)
	e1, _ := d1.NewEndpoint(cq1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go e1.Connect(ctx, e0.LocalAddress())
	if err := e0.Connect(ctx, e1.LocalAddress()); err != nil {
		b.Fatal(err)
	}
	src, _ := d0.Register(make([]byte, 64), 0)
	dst, _ := d1.Register(make([]byte, 64), transport.AccessLocalWrite)
	var c [1]transport.Completion
	b.ReportAllocs()
	for b.Loop() {
		if err := e1.PostRecv(1, dst, 0, 64); err != nil {
			b.Fatal(err)
		}
		if err := e0.PostSend(2, src, 0, 64); err != nil {
			b.Fatal(err)
		}
		if _, err := cq1.Wait(ctx, c[:]); err != nil || c[0].Err != nil {
			b.Fatal(err, c[0].Err)
		}
		if _, err := cq0.Wait(ctx, c[:]); err != nil || c[0].Err != nil {
			b.Fatal(err, c[0].Err)
		}
	}
}
