package mem

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Network. The zero value is a fault-free network.
type Options struct {
	// Seed seeds every random choice of fault injection (not the remote
	// keys, which come from crypto/rand). Endpoint k of the network, counted
	// in creation order, draws from its own stream derived from Seed.
	Seed int64
	// Delay is the largest random delay an endpoint waits before carrying
	// out each send, write or read. Zero means none.
	Delay time.Duration
	// CutProb is the probability that carrying out a send, write or read
	// cuts the connection instead (the request fails with ErrLink).
	CutProb float64
}

// Network is the medium in-memory devices share: endpoints of devices on
// one Network can connect to each other. It is safe for concurrent use.
type Network struct {
	id   uint64
	opts Options

	mu      sync.Mutex
	eps     map[uint64]*Endpoint // by endpoint id; only open endpoints
	nextEP  uint64
	nextDev int
	seeds   *rand.Rand // guarded by mu
}

var networkIDs atomic.Uint64

// NewNetwork returns an empty network with the given options.
func NewNetwork(opts Options) *Network {
	return &Network{
		id:     networkIDs.Add(1),
		opts:   opts,
		eps:    make(map[uint64]*Endpoint),
		nextEP: 1,
		seeds:  rand.New(rand.NewPCG(uint64(opts.Seed), 0x6d656d)),
	}
}

// NewDevice creates a device on the network.
func (n *Network) NewDevice() *Device {
	n.mu.Lock()
	n.nextDev++
	k := n.nextDev
	n.mu.Unlock()
	return &Device{
		net:     n,
		name:    fmt.Sprintf("mem:%d/%d", n.id, k),
		regions: make(map[uint64]*Region),
		eps:     make(map[*Endpoint]struct{}),
		cqs:     make(map[*CompletionQueue]struct{}),
	}
}

// addrMagic starts every address blob of this package.
const addrMagic = "mem1"

// addrLen is the length of an address blob: magic, network id, endpoint id.
const addrLen = len(addrMagic) + 16

func encodeAddr(netID, epID uint64) []byte {
	b := make([]byte, addrLen)
	copy(b, addrMagic)
	binary.BigEndian.PutUint64(b[4:], netID)
	binary.BigEndian.PutUint64(b[12:], epID)
	return b
}

func decodeAddr(b []byte) (netID, epID uint64, ok bool) {
	if len(b) != addrLen || string(b[:4]) != addrMagic {
		return 0, 0, false
	}
	return binary.BigEndian.Uint64(b[4:]), binary.BigEndian.Uint64(b[12:]), true
}

// addEndpoint gives e an id and a random stream and makes it reachable.
func (n *Network) addEndpoint(e *Endpoint) {
	n.mu.Lock()
	defer n.mu.Unlock()
	e.id = n.nextEP
	n.nextEP++
	e.addr = encodeAddr(n.id, e.id)
	e.rng = rand.New(rand.NewPCG(n.seeds.Uint64(), n.seeds.Uint64()))
	n.eps[e.id] = e
}

// link connects a and b, which want each other. n.mu is held.
func (n *Network) link(a, b *Endpoint) {
	c := &conn{a: a, b: b}
	c.budget.Store(-1)
	for _, e := range []*Endpoint{a, b} {
		peer := a
		if e == a {
			peer = b
		}
		e.mu.Lock()
		e.peer = peer
		e.conn = c
		e.connected = true
		e.done = make(chan struct{})
		close(e.up)
		e.mu.Unlock()
		go e.run()
	}
}
