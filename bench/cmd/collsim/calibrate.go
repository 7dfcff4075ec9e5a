package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/goccl/goccl/bench/osu"
	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/shm"
	"github.com/goccl/goccl/transport/tcp"
)

// calibRecord is one rank's measurement of one size in `collsim
// calibrate`: the ring allreduce's wall time per call (OSU's way: each call
// timed alone, a barrier after it) and the CPU time the process spent per
// call (getrusage, user and system, all threads), and the CPU's reduction
// and copy speeds measured in process.
type calibRecord struct {
	Coll   string  `json:"collective,omitempty"` // "" (allreduce), broadcast (root 0) or alltoall
	Algo   string  `json:"algorithm"`
	Rank   int     `json:"rank"`
	Ranks  int     `json:"ranks"`
	Bytes  int     `json:"bytes"`
	Iters  int     `json:"iters"`
	WallS  float64 `json:"wall_s"`
	CPUS   float64 `json:"cpu_s"`
	Gamma  float64 `json:"gamma"`
	Copy   float64 `json:"copy"`
	Chunk  int     `json:"chunk_bytes"`
	Slots  int     `json:"slots"`
	Inline int     `json:"inline"`
}

// smallSize is the largest size calibrate times with its small-size counts
// (-is, -xs): OSU's LARGE_MESSAGE_SIZE.
const smallSize = 8 << 10

// calibrateCmd runs as a rank of a goccl job (under gorun): for each size
// it times iters allreduces (ring, or -algorithm) of float32 sums out of
// place, as OSU's allreduce benchmark calls them (or, with -coll
// broadcast, broadcasts from rank 0; with -coll alltoall, all-to-alls of
// a block of the size per rank, whose -algorithm must be one of
// all-to-all's), and prints one JSON line per size.
func calibrateCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("collsim calibrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sizes := fs.String("sizes", "8,64K,1M,4M", "buffer sizes in bytes")
	iters := fs.Int("i", 40, "timed calls per size above 8 KiB")
	warm := fs.Int("x", 5, "warm-up calls per size above 8 KiB")
	itersSmall := fs.Int("is", 400, "timed calls per size up to 8 KiB")
	warmSmall := fs.Int("xs", 200, "warm-up calls per size up to 8 KiB")
	algo := fs.String("algorithm", "ring", "the collective's algorithm")
	coll := fs.String("coll", "allreduce", "allreduce, broadcast (from rank 0, in place; the root's time per call is its CPU for a call and the messages it sends, the leaves' what they wait), or alltoall (each size a block per peer, as OSU's)")
	warmTime := fs.Duration("warm-time", 300*time.Millisecond, "before the first size, warm-up calls of it for this long on every rank")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if *coll != "allreduce" && *coll != "broadcast" && *coll != "alltoall" {
		return usageError{fmt.Errorf("-coll %q: want allreduce, broadcast or alltoall", *coll)}
	}
	ns, err := parseInts(*sizes)
	if err != nil {
		return usageError{fmt.Errorf("-sizes: %w", err)}
	}
	ctx := context.Background()
	// A fixed cost model: tuning at Init would only add start-up time.
	c, err := comm.Init(ctx, comm.Options{Alpha: 20e-6, Beta: 1e-9})
	if err != nil {
		return err
	}
	defer c.Close()
	gamma, copyCost := cpuSpeeds()
	biggest := slices.Max(ns)
	blocks := 1 // an all-to-all's buffers hold a block per rank
	if *coll == "alltoall" {
		blocks = c.Size()
	}
	biggest *= blocks
	send, err := comm.Alloc[float32](c, biggest/4)
	if err != nil {
		return err
	}
	recv, err := comm.Alloc[float32](c, biggest/4)
	if err != nil {
		return err
	}
	opt := comm.WithAlgorithm(*algo)
	call := func(count int) error {
		switch *coll {
		case "broadcast":
			return comm.Broadcast(ctx, c, send[:count], 0, opt)
		case "alltoall":
			return comm.Alltoall(ctx, c, send[:count*blocks], recv[:count*blocks], opt)
		}
		return comm.Allreduce(ctx, c, send[:count], recv[:count], comm.Sum, opt)
	}
	for i, n := range ns {
		count := n / 4
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		// A fresh job's first calls run slower for a while between
		// network namespaces (2 ranks, 8 B: 90-145 us per call over the
		// first 200 calls, 28-35 us after 2,000), and the first size
		// fixes the model's alpha: warm up for a time, not a count.
		if i == 0 && *warmTime > 0 {
			if err := osu.WarmUpFor(ctx, c, *warmTime, func() error { return call(count) }); err != nil {
				return err
			}
		}
		// As OSU: small sizes take more calls, and more warm-up. A job's
		// first few hundred small calls run slower here (2 ranks over
		// TCP, 8 B: 56 us per call over the first 200 after 3 warm-up
		// calls, 70-105 us over the first 20, 31-37 us from then on), and
		// 20 calls of 35 us are at the mercy of a single preemption.
		nIters, nWarm := *iters, *warm
		if n <= smallSize {
			nIters, nWarm = *itersSmall, *warmSmall
		}
		var wall, cpu float64
		for i := range nWarm + nIters {
			c0 := cpuSeconds()
			t0 := time.Now()
			if err := call(count); err != nil {
				return err
			}
			d := time.Since(t0).Seconds()
			dc := cpuSeconds() - c0
			if err := c.Barrier(ctx); err != nil {
				return err
			}
			if i >= nWarm {
				wall += d
				cpu += dc
			}
		}
		collName := ""
		if *coll != "allreduce" {
			collName = *coll
		}
		rec := calibRecord{Coll: collName, Algo: *algo, Rank: c.Rank(), Ranks: c.Size(), Bytes: count * 4, Iters: nIters,
			WallS: wall / float64(nIters), CPUS: cpu / float64(nIters), Gamma: gamma, Copy: copyCost,
			Chunk: 512 << 10, Slots: 8, Inline: inlineOf(c.PeerTransport((c.Rank() + 1) % c.Size()))}
		b, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n", b)
	}
	return nil
}

// inlineOf is the largest send the named transport copies at post
// (transport.Inliner), which the executor counts done at once: TCP's 32
// KiB, shared memory's 4 KiB; 0 for the others (verbs: the queue pair's,
// not known here). Calibrations before 1 December wrote 4096 for TCP, and
// the model waited for an acknowledgement after every message of 8-32 KiB.
func inlineOf(name string) int {
	var in transport.Inliner
	switch {
	case strings.HasPrefix(name, "tcp"):
		in = (*tcp.Device)(nil)
	case strings.HasPrefix(name, "shm"):
		in = (*shm.Device)(nil)
	default:
		return 0
	}
	return in.MaxInline()
}

// cpuSeconds is the user and system CPU time of the process so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// cpuSpeeds measures, in this process, seconds per byte of the reduction
// kernel (float32 sum) and of a copy, as the executor runs them: a chunk
// of 512 KiB out of a staging slot into a 16 MiB buffer, at successive
// offsets. Each is the fastest of five rounds of 32 chunks.
func cpuSpeeds() (gamma, copyCost float64) {
	const chunk, span = 512 << 10, 16 << 20
	slot := make([]byte, chunk)
	buf := make([]byte, span)
	best := func(f func(dst []byte)) float64 {
		b := 1.0
		for range 5 {
			t0 := time.Now()
			for i := range 32 {
				off := (i * chunk) % span
				f(buf[off : off+chunk])
			}
			b = min(b, time.Since(t0).Seconds()/(32*chunk))
		}
		return b
	}
	gamma = best(func(dst []byte) { _ = collectives.Reduce(collectives.Float32, collectives.Sum, dst, slot) })
	copyCost = best(func(dst []byte) { copy(dst, slot) })
	return gamma, copyCost
}
