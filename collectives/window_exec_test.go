package collectives

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/mem"
)

// switchboard sets up links between executors of one process on demand,
// as a communicator does through its store: a rank's Connect publishes an
// endpoint per new peer, waits for the peers' and connects. It counts the
// links each rank holds and the most it ever held.
type switchboard struct {
	net    *mem.Network
	nslots int
	slot   int
	mu     sync.Mutex
	cond   *sync.Cond
	addrs  map[[3]int][]byte // (from, to, generation): endpoint address
	remote map[[3]int]transport.RemoteRegion
	gen    [][]int // per rank, per peer: links made so far
	held   []int
	most   []int
	devs   []transport.Device
	regs   [][]transport.Region // per rank, per peer: the staging registered
}

func newSwitchboard(t *testing.T, size, nslots, slot int) (*switchboard, []*Executor) {
	sb := &switchboard{net: mem.NewNetwork(mem.Options{}), nslots: nslots, slot: slot,
		addrs: map[[3]int][]byte{}, remote: map[[3]int]transport.RemoteRegion{},
		gen: make([][]int, size), held: make([]int, size), most: make([]int, size),
		devs: make([]transport.Device, size), regs: make([][]transport.Region, size)}
	sb.cond = sync.NewCond(&sb.mu)
	ex := make([]*Executor, size)
	for r := range size {
		sb.devs[r] = sb.net.NewDevice()
		t.Cleanup(func() { sb.devs[r].Close() })
		cq, err := sb.devs[r].NewCompletionQueue(size * CQEntriesPerLink(nslots))
		if err != nil {
			t.Fatal(err)
		}
		sb.gen[r] = make([]int, size)
		sb.regs[r] = make([]transport.Region, size)
		e := &Executor{Rank: r, Size: size, Links: make([]*Link, size), CQ: cq, NSlots: nslots, SlotSize: slot}
		e.Connect = func(c *Call, peers []int) error { return sb.connect(e, peers) }
		e.Release = func(peer int) { sb.release(e, peer) }
		ex[r] = e
	}
	return sb, ex
}

func (sb *switchboard) connect(e *Executor, peers []int) error {
	r, dev := e.Rank, sb.devs[e.Rank]
	eps := make([]transport.Endpoint, len(peers))
	for i, p := range peers {
		ep, err := dev.NewEndpoint(e.CQ)
		if err != nil {
			return err
		}
		reg, err := dev.Register(make([]byte, StagingSize(sb.nslots, sb.slot)), transport.AccessLocalWrite|transport.AccessRemoteWrite)
		if err != nil {
			return err
		}
		eps[i], sb.regs[r][p] = ep, reg
		sb.mu.Lock()
		k := [3]int{r, p, sb.gen[r][p]}
		sb.addrs[k], sb.remote[k] = ep.LocalAddress(), reg.Remote()
		sb.cond.Broadcast()
		sb.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make([]error, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		k := [3]int{p, r, sb.gen[r][p]}
		sb.mu.Lock()
		for sb.addrs[k] == nil {
			sb.cond.Wait()
		}
		addr, rem := sb.addrs[k], sb.remote[k]
		sb.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = eps[i].Connect(ctx, addr); errs[i] != nil {
				return
			}
			l, err := NewLink(p, eps[i], sb.regs[r][p], rem, sb.nslots)
			if err != nil {
				errs[i] = err
				return
			}
			l.Transient = true
			e.Links[p] = l
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	sb.mu.Lock()
	sb.held[r] += len(peers)
	sb.most[r] = max(sb.most[r], sb.held[r])
	sb.mu.Unlock()
	return nil
}

func (sb *switchboard) release(e *Executor, peer int) {
	r := e.Rank
	e.Links[peer].EP.Close()
	sb.devs[r].Deregister(sb.regs[r][peer])
	sb.mu.Lock()
	sb.gen[r][peer]++
	sb.held[r]--
	sb.mu.Unlock()
}

// A windowed all-to-all over the executor alone: each rank connects a
// batch of at most w peers at a time through the Connect hook and
// releases every link once both sides are done with it (byes), so it
// never holds more than w links; the blocks arrive exactly, twice in a
// row (the second run connects every pair again), with chunks of a few
// bytes and two staging slots, so that every link carries several chunks
// under flow control.
func TestExecutorWindow(t *testing.T) {
	for _, size := range []int{9, 16} {
		t.Run(fmt.Sprintf("ranks=%d", size), func(t *testing.T) {
			const w, count = 4, 40
			sb, ex := newSwitchboard(t, size, 2, 64)
			for _, e := range ex {
				e.Window = w
			}
			for seq := uint32(1); seq <= 2; seq++ {
				errs := make([]error, size)
				var wg sync.WaitGroup
				for r, e := range ex {
					wg.Add(1)
					go func() {
						defer wg.Done()
						errs[r] = runAlltoall(e, sb.devs[r], count, seq)
					}()
				}
				wg.Wait()
				for r, err := range errs {
					if err != nil {
						t.Fatalf("run %d: rank %d: %v", seq, r, err)
					}
				}
				for r, e := range ex {
					for p, l := range e.Links {
						if l != nil {
							t.Errorf("run %d: rank %d still holds its link to rank %d", seq, r, p)
						}
					}
					if sb.held[r] != 0 {
						t.Errorf("run %d: rank %d holds %d links", seq, r, sb.held[r])
					}
				}
			}
			for r, m := range sb.most {
				if m > w || m < 2 {
					t.Errorf("rank %d held up to %d links at once, want 2 to %d", r, m, w)
				}
			}
		})
	}
}

// runAlltoall runs a pairwise all-to-all of count uint32 per block on e
// and checks what arrives: block j of rank r holds r*1e6 + dest*1e3 + i.
func runAlltoall(e *Executor, dev transport.Device, count int, seq uint32) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return runAlltoallWith(ctx, e, dev, PairwiseAlltoall(e.Rank, e.Size, count, 4), count, seq)
}

// runAlltoallWith runs the all-to-all schedule s (count uint32 per block)
// on e under ctx and checks what arrives, as runAlltoall.
func runAlltoallWith(ctx context.Context, e *Executor, dev transport.Device, s Schedule, count int, seq uint32) error {
	n, r := e.Size, e.Rank
	p, err := Compile(s, e.SlotSize)
	if err != nil {
		return err
	}
	in, out := make([]byte, n*count*4), make([]byte, n*count*4)
	for j := range n {
		for i := range count {
			binary.LittleEndian.PutUint32(in[(j*count+i)*4:], uint32(r*1e6+j*1e3+i))
		}
	}
	c := &Call{Plan: p, Type: Uint32, Seq: seq, Coll: "alltoall", Count: count, Root: -1}
	bufs := map[Buf][]byte{BufData: out, BufInput: in}
	if s.ScratchBytes > 0 {
		bufs[BufScratch] = make([]byte, s.ScratchBytes)
	}
	for b, buf := range bufs {
		reg, err := dev.Register(buf, transport.AccessLocalWrite)
		if err != nil {
			return err
		}
		defer dev.Deregister(reg)
		c.Bufs[b] = Target{Region: reg}
	}
	if err := e.Run(ctx, c); err != nil {
		return err
	}
	for j := range n {
		for i := range count {
			if got, want := binary.LittleEndian.Uint32(out[(j*count+i)*4:]), uint32(j*1e6+r*1e3+i); got != want {
				return fmt.Errorf("block %d element %d: %d, want %d", j, i, got, want)
			}
		}
	}
	return nil
}
