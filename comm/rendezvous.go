package comm

import (
	"context"
	"fmt"
	"sync"
)

// LocalGroup is an in-process Rendezvous for ranks that are goroutines of
// one process (tests, and programs that simulate a job). Make one with
// NewLocalGroup(n) and hand Member(r) to rank r.
type LocalGroup struct {
	size int
	mu   sync.Mutex
	cond *sync.Cond
	gen  int      // completed allgather rounds
	in   [][]byte // contributions to the current round
	n    int      // contributions so far
	out  [][]byte // result of the last completed round
	kv   map[string][]byte
}

// NewLocalGroup makes a group of size ranks.
func NewLocalGroup(size int) *LocalGroup {
	g := &LocalGroup{size: size, in: make([][]byte, size)}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// Member returns rank r's view of the group.
func (g *LocalGroup) Member(r int) Rendezvous { return &localMember{g: g, rank: r} }

type localMember struct {
	g    *LocalGroup
	rank int
}

func (m *localMember) Rank() int    { return m.rank }
func (m *localMember) Size() int    { return m.g.size }
func (m *localMember) Close() error { return nil }
func (m *localMember) Barrier(ctx context.Context) error {
	_, err := m.Allgather(ctx, nil)
	return err
}

// Allgather blocks until every rank has contributed to the round.
func (m *localMember) Allgather(ctx context.Context, data []byte) ([][]byte, error) {
	g := m.g
	stop := context.AfterFunc(ctx, func() {
		g.mu.Lock()
		g.cond.Broadcast()
		g.mu.Unlock()
	})
	defer stop()
	g.mu.Lock()
	defer g.mu.Unlock()
	gen := g.gen
	g.in[m.rank] = append([]byte(nil), data...)
	g.n++
	if g.n == g.size {
		g.out, g.in, g.n = g.in, make([][]byte, g.size), 0
		g.gen++
		g.cond.Broadcast()
	}
	for g.gen == gen {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("local rendezvous: rank %d: allgather: %w", m.rank, err)
		}
		g.cond.Wait()
	}
	return g.out, nil
}

// Set stores a value in the group's key-value space.
func (m *localMember) Set(ctx context.Context, key string, value []byte) error {
	g := m.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.kv == nil {
		g.kv = map[string][]byte{}
	}
	g.kv[key] = append([]byte(nil), value...)
	g.cond.Broadcast()
	return nil
}

// Delete removes keys from the group's key-value space.
func (m *localMember) Delete(ctx context.Context, keys ...string) error {
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	for _, k := range keys {
		delete(m.g.kv, k)
	}
	return nil
}

// Get blocks until key is set or ctx ends.
func (m *localMember) Get(ctx context.Context, key string) ([]byte, error) {
	g := m.g
	stop := context.AfterFunc(ctx, func() {
		g.mu.Lock()
		g.cond.Broadcast()
		g.mu.Unlock()
	})
	defer stop()
	g.mu.Lock()
	defer g.mu.Unlock()
	for {
		if v, ok := g.kv[key]; ok {
			return v, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("local rendezvous: rank %d: get %q: %w", m.rank, key, err)
		}
		g.cond.Wait()
	}
}
