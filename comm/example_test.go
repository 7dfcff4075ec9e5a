package comm_test

import (
	"context"
	"fmt"
	"log"
	"sync"

	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/transport/mem"
)

// train is what every rank of a data-parallel job runs (README.md, "Using
// goccl", quotes it).
func train(ctx context.Context, c *comm.Comm) error {
	grads, err := comm.Alloc[float32](c, 4) // registered memory: the zero-copy fast path
	if err != nil {
		return err
	}
	defer comm.Free(c, grads)
	for i := range grads {
		grads[i] = float32(c.Rank() + 1)
	}
	if err := comm.Allreduce(ctx, c, grads, grads, comm.Sum); err != nil { // in place
		return err
	}

	bucket := []float32{float32(c.Rank()), 1}
	req := comm.AllreduceAsync(c, bucket, bucket, comm.Avg) // overlaps with your compute
	if err := req.Wait(ctx); err != nil {
		return err
	}

	p, err := comm.AllreduceInit(c, nil, bucket, comm.Sum) // persistent: Start, then Wait or Test; no allocation
	if err != nil {
		return err
	}
	for range 3 {
		if err := p.Start(); err != nil {
			return err
		}
		if err := p.Wait(ctx); err != nil {
			return err
		}
	}
	if c.Rank() == 0 {
		fmt.Println("grads", grads, "bucket", bucket)
	}
	return nil
}

// A rank of a job started by gorun, torchrun, srun or mpirun joins it
// with Init, which reads its rank, the job's size and the bootstrap
// store from the environment (run alone, the program is a job of one
// rank).
func ExampleInit() {
	ctx := context.Background()
	c, err := comm.Init(ctx, comm.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if err := train(ctx, c); err != nil {
		log.Fatal(err)
	}
}

// Ranks can also be goroutines of one process, connected by the
// in-memory transport: here two of them run train.
func ExampleNewLocalGroup() {
	ctx := context.Background()
	const ranks = 2
	network := mem.NewNetwork(mem.Options{})
	group := comm.NewLocalGroup(ranks)
	var wg sync.WaitGroup
	for r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := comm.New(ctx, group.Member(r), network.NewDevice(), comm.Options{OwnDevice: true})
			if err != nil {
				log.Fatal(err)
			}
			defer c.Close()
			if err := train(ctx, c); err != nil {
				log.Fatal(err)
			}
		}()
	}
	wg.Wait()
	// Output: grads [3 3 3 3] bucket [4 8]
}
