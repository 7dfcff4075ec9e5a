package comm

import (
	"context"
	"errors"
	"fmt"
	"unsafe"
)

// Persistent is a collective prepared once and started many times on the
// same buffers, like MPI's persistent collectives (MPI_Allreduce_init,
// MPI_Start, MPI_Wait). Starting and waiting allocate nothing, which is
// what a training loop's per-step gradient allreduce wants.
//
// A Persistent is used by one goroutine at a time: Start, then Wait (or
// Test until it reports true), then Start again.
type Persistent struct {
	r       Request
	running bool
	// held: the Alloc'd buffers that held send and recv when it was
	// prepared (Start refuses to run on one freed since).
	held [2]allocHold
}

// ErrRunning is returned by Start while the previous start has not been
// waited for.
var ErrRunning = errors.New("persistent collective still running")

// AllreduceInit prepares an allreduce of send into recv (same length; send
// nil or equal to recv for in place), with opts applying to every start.
// Arguments are checked now, and a closed or failed communicator refuses
// it with the error a call would get. A buffer from Alloc must stay allocated while
// the Persistent is used: a start once it was freed (Free refuses only
// while a start runs; its memory may belong to a later Alloc by then) is
// refused as a call with bad arguments is: its Wait returns the refusal,
// and the communicator breaks on every rank. The other ...Init functions
// prepare the other collectives alike (MPI_Bcast_init and its siblings);
// each takes its blocking form's arguments, and every rank must start the
// same collectives in the same order, as it would call them.
func AllreduceInit[T Number](c *Comm, send, recv []T, op Op, opts ...CallOption) (*Persistent, error) {
	return persist(c, "allreduce", opts, func(r *Request) *Request {
		return c.allreduce(r, asBytes(orRecv(send, recv)), asBytes(recv), TypeOf[T](), op)
	})
}

// ScanInit prepares a Scan (MPI_Scan_init).
func ScanInit[T Number](c *Comm, send, recv []T, op Op, opts ...CallOption) (*Persistent, error) {
	return persist(c, "scan", opts, func(r *Request) *Request {
		return c.scan(r, collScan, asBytes(orRecv(send, recv)), asBytes(recv), TypeOf[T](), op)
	})
}

// ExscanInit prepares an Exscan (MPI_Exscan_init).
func ExscanInit[T Number](c *Comm, send, recv []T, op Op, opts ...CallOption) (*Persistent, error) {
	return persist(c, "exscan", opts, func(r *Request) *Request {
		return c.scan(r, collExscan, asBytes(orRecv(send, recv)), asBytes(recv), TypeOf[T](), op)
	})
}

// BroadcastInit prepares a Broadcast of root's buf (MPI_Bcast_init).
func BroadcastInit[T Number](c *Comm, buf []T, root int, opts ...CallOption) (*Persistent, error) {
	return persist(c, "broadcast", opts, func(r *Request) *Request {
		return c.broadcast(r, asBytes(buf), TypeOf[T](), root)
	})
}

// ReduceInit prepares a Reduce of send into root's recv (MPI_Reduce_init).
func ReduceInit[T Number](c *Comm, send, recv []T, op Op, root int, opts ...CallOption) (*Persistent, error) {
	return persist(c, "reduce", opts, func(r *Request) *Request {
		return c.reduce(r, asBytes(send), asBytes(recv), TypeOf[T](), op, root)
	})
}

// AllgatherInit prepares an Allgather of send into recv
// (MPI_Allgather_init).
func AllgatherInit[T Number](c *Comm, send, recv []T, opts ...CallOption) (*Persistent, error) {
	return persist(c, "allgather", opts, func(r *Request) *Request {
		return c.allgather(r, asBytes(send), asBytes(recv), TypeOf[T]())
	})
}

// ReduceScatterInit prepares a ReduceScatter of send into recv
// (MPI_Reduce_scatter_block_init).
func ReduceScatterInit[T Number](c *Comm, send, recv []T, op Op, opts ...CallOption) (*Persistent, error) {
	return persist(c, "reduce-scatter", opts, func(r *Request) *Request {
		return c.reduceScatter(r, asBytes(send), asBytes(recv), TypeOf[T](), op)
	})
}

// AlltoallInit prepares an Alltoall of send into recv (MPI_Alltoall_init).
func AlltoallInit[T Number](c *Comm, send, recv []T, opts ...CallOption) (*Persistent, error) {
	return persist(c, "alltoall", opts, func(r *Request) *Request {
		return c.alltoall(r, asBytes(send), asBytes(recv), TypeOf[T]())
	})
}

// AllgathervInit prepares an Allgatherv (MPI_Allgatherv_init): counts
// and displs are copied now.
func AllgathervInit[T Number](c *Comm, send, recv []T, counts, displs []int, opts ...CallOption) (*Persistent, error) {
	return persist(c, "allgatherv", opts, func(r *Request) *Request {
		return c.allgatherv(r, asBytes(send), asBytes(recv), TypeOf[T](), counts, displs)
	})
}

// AlltoallvInit prepares an Alltoallv (MPI_Alltoallv_init): counts and
// displacements are copied now.
func AlltoallvInit[T Number](c *Comm, send []T, sendCounts, sendDispls []int, recv []T, recvCounts, recvDispls []int, opts ...CallOption) (*Persistent, error) {
	return persist(c, "alltoallv", opts, func(r *Request) *Request {
		return c.alltoallv(r, asBytes(send), sendCounts, sendDispls, asBytes(recv), recvCounts, recvDispls, TypeOf[T]())
	})
}

// GathervInit prepares a Gatherv (MPI_Gatherv_init): counts and displs
// are copied now.
func GathervInit[T Number](c *Comm, send, recv []T, counts, displs []int, root int, opts ...CallOption) (*Persistent, error) {
	return persist(c, "gatherv", opts, func(r *Request) *Request {
		return c.gatherv(r, asBytes(send), asBytes(recv), TypeOf[T](), counts, displs, root)
	})
}

// ScattervInit prepares a Scatterv (MPI_Scatterv_init): counts and displs
// are copied now.
func ScattervInit[T Number](c *Comm, send, recv []T, counts, displs []int, root int, opts ...CallOption) (*Persistent, error) {
	return persist(c, "scatterv", opts, func(r *Request) *Request {
		return c.scatterv(r, asBytes(send), asBytes(recv), TypeOf[T](), counts, displs, root)
	})
}

// BarrierInit prepares a Barrier (MPI_Barrier_init).
func BarrierInit(c *Comm, opts ...CallOption) (*Persistent, error) {
	return persist(c, "barrier", opts, func(r *Request) *Request { return c.barrier(r) })
}

// persist prepares the Persistent of the call that fill makes of its
// request: fill runs the call's checks, as its asynchronous form does,
// but with prepOnly set submitOrReject queues nothing and leaves a
// refusal in the request's err, returned here (nothing breaks: nothing
// was called yet).
func persist(c *Comm, name string, opts []CallOption, fill func(r *Request) *Request) (*Persistent, error) {
	if c == nil {
		return nil, errNilComm(name + " init")
	}
	p := &Persistent{}
	p.r.done = make(chan struct{}, 1)
	p.r.pooled = true // signal done with a send, never close
	p.r.persistent = true
	p.r.prepOnly = true
	applyOpts(&p.r, opts)
	fill(&p.r)
	p.r.prepOnly = false
	if err := p.r.err; err != nil {
		return nil, c.inSub(err) // which communicator, as a call's error says
	}
	// Prepared on a closed or broken communicator, it could never start:
	// said here, as a call then is refused (before, only its first start
	// said so).
	if err := c.usable(name + " init"); err != nil {
		return nil, err
	}
	p.held = [2]allocHold{c.holdOf(p.r.send), c.holdOf(p.r.recv)}
	return p, nil
}

// Start queues the collective. It returns at once.
func (p *Persistent) Start() error {
	if p == nil {
		return errors.New("comm: Start of a nil *Persistent")
	}
	if p.r.c == nil {
		return errors.New("comm: Start of a Persistent not made by an ...Init function")
	}
	if p.running {
		return fmt.Errorf("comm: %s: %w", p.r.kind, ErrRunning)
	}
	p.running = true
	p.r.err, p.r.refused = nil, nil
	for i, b := range [2][]byte{p.r.send, p.r.recv} {
		if !p.held[i].stillHeld(b) {
			if p.r.c.isClosed() {
				// Close released it, not the caller: submit finishes
				// the start with ErrClosed, as any call after Close.
				break
			}
			// Refused as any call's arguments: in its turn it fails, and
			// breaks the communicator on every rank, naming this one.
			p.r.refused = p.r.c.errorf(p.r.kind, p.r.dt, "its buffer %#x from Alloc was freed since the Persistent was prepared: prepare it again on live buffers", uintptr(unsafe.Pointer(&b[0])))
			break
		}
	}
	p.r.c.submit(&p.r)
	return nil
}

// Wait blocks until the started collective finishes and returns its error.
// If ctx ends first Wait returns ctx's error and the collective goes on;
// call Wait again before touching the buffers.
func (p *Persistent) Wait(ctx context.Context) error {
	if p == nil {
		return errors.New("comm: Wait of a nil *Persistent")
	}
	if !p.running {
		return nil
	}
	if done, err := p.Test(); done {
		// Finished: its result, even if ctx has ended too (a select of
		// both picks either at random).
		return err
	}
	select {
	case <-p.r.done:
		p.running = false
		return p.r.c.inSub(p.r.err)
	case <-ctx.Done():
		return p.r.c.inSub(fmt.Errorf("comm: rank %d: waiting for %s: %w", p.r.c.Rank(), p.r.kind, ctx.Err()))
	}
}

// Test reports whether the started collective has finished, and its error
// if so, as MPI_Test does for a persistent request: once it reports true
// the Persistent may be started again and its buffers are the caller's. It
// never blocks. With nothing started (or the start already waited for or
// tested finished) it reports true and nil.
func (p *Persistent) Test() (bool, error) {
	if p == nil {
		return true, errors.New("comm: Test of a nil *Persistent")
	}
	if !p.running {
		return true, nil
	}
	select {
	case <-p.r.done:
		p.running = false
		return true, p.r.c.inSub(p.r.err)
	default:
		return false, nil
	}
}

// Algorithm names the algorithm the last finished start ran; "" before the
// first Wait that reported it finished, and while a start runs.
func (p *Persistent) Algorithm() string {
	if p == nil || p.running {
		return ""
	}
	return p.r.used
}
