package simulate

import (
	"fmt"

	"github.com/goccl/goccl/collectives"
)

// Machine is where a job's ranks run: hosts of RanksPerHost ranks each
// (rank r on host r/RanksPerHost; the last host may hold fewer), and the
// cores their CPU work shares.
type Machine struct {
	Ranks        int
	RanksPerHost int // 0: every rank on one host
	// Cores is how many cores the ranks of one CPU pool share; 0: every
	// rank has a core of its own (no CPU contention between ranks).
	Cores int
	// PoolRanks is how many consecutive ranks share a pool of Cores cores;
	// 0: a pool per host. A validation run whose "hosts" are network
	// namespaces of one machine sets it to Ranks: every rank competes for
	// the machine's cores.
	PoolRanks int
}

// Hosts is the number of hosts.
func (m Machine) Hosts() int {
	rph := m.rph()
	return (m.Ranks + rph - 1) / rph
}

func (m Machine) rph() int {
	if m.RanksPerHost <= 0 || m.RanksPerHost > m.Ranks {
		return max(m.Ranks, 1)
	}
	return m.RanksPerHost
}

func (m Machine) poolRanks() int {
	if m.PoolRanks <= 0 {
		return m.rph()
	}
	return m.PoolRanks
}

// Topology is the selector's view of the machine.
func (m Machine) Topology() collectives.Topology {
	return collectives.Topology{Size: m.Ranks, Hosts: m.Hosts()}
}

func (m Machine) validate() error {
	if m.Ranks < 1 {
		return fmt.Errorf("simulate: %d ranks", m.Ranks)
	}
	if m.RanksPerHost < 0 || m.Cores < 0 || m.PoolRanks < 0 {
		return fmt.Errorf("simulate: negative ranks per host, cores or pool size in %+v", m)
	}
	return nil
}

// Link is the cost of one class of link (collectives.LinkLocal within a
// host, collectives.LinkNet between hosts) in a LogGP-style model with
// ports:
//
//   - Alpha: seconds from the moment a message's last byte leaves its
//     sender's port until it is at the receiver (wire and wake-up latency;
//     it takes no CPU). Credits and acknowledgements travel in Alpha too.
//   - Beta: seconds per byte of a port. A message passes its sender's
//     output port and its receiver's input port, each a first-come
//     first-served server: for LinkNet the ports are the hosts' NICs, one
//     per direction, shared by the host's ranks; for LinkLocal every rank
//     has its own pair of ports.
//   - Overhead: CPU seconds per message at each end (LogGP's o): putting
//     it on the transport, and taking it off (credits and acknowledgements
//     ride along: their cost is part of it).
//   - PerByte: CPU seconds per byte at each end, for transports that copy
//     through the CPU (TCP's socket copies); 0 for zero-copy transports.
//   - Burst: bytes a port passes at once after it idled: a token bucket
//     of Burst bytes, refilled at the port's rate, in front of it (what
//     tc's tbf puts on an emulated NIC; scripts/sim-validate.sh shapes its
//     hosts' links so). 0: none, every byte at Beta (a NIC never sends
//     faster than its rate).
type Link struct {
	Alpha    float64 `json:"alpha"`
	Beta     float64 `json:"beta"`
	Overhead float64 `json:"overhead"`
	PerByte  float64 `json:"per_byte"`
	Burst    float64 `json:"burst,omitempty"`
	// WriteTail is the part of a write's Overhead (a post's, or a
	// credit's written alone) spent after its message is readable at the
	// other end: the kernel delivers a TCP segment over loopback or a veth
	// pair within the sender's system call, and a polling receiver reads
	// it while the sender returns. The sender's thread is busy for all of
	// Overhead; its message leaves WriteTail before that (at most
	// Overhead; 0: when the write returns).
	WriteTail float64 `json:"write_tail,omitempty"`
}

// Params is the cost model: links per class, the CPU's reduction and copy
// speeds, and the executor's settings.
type Params struct {
	Links [collectives.NumLinkClasses]Link
	// Gamma is CPU seconds per byte reduced (a RecvReduce chunk's
	// reduction out of its staging slot).
	Gamma float64
	// Copy is CPU seconds per byte copied locally: a Recv chunk's copy out
	// of its staging slot, Copy chunks and a schedule's Pre copies.
	Copy float64
	// ChunkBytes is the executor's chunk and staging slot size
	// (comm.Options.ChunkSize; default 512 KiB).
	ChunkBytes int
	// Slots is the number of staging slots per link: chunks in flight to
	// one peer before a credit comes back (comm.Options.Slots; default 8).
	Slots int
	// Inline is the largest chunk the transport copies at post time, which
	// the executor counts done at once (TCP: 32 KiB, shared memory 4 KiB;
	// 0 for none).
	Inline int
	// CallOverhead is CPU seconds each rank spends per call besides its
	// messages, copies and reductions (entering the call, choosing and
	// looking up its plan, completing it), charged on the rank's executor
	// at the call's start. With it, Overhead is what one more message
	// costs: 2 ranks over TCP, 8 B, an allreduce of 2 messages each way (a
	// ring) took 30 us of CPU per call, of one (recursive doubling) about
	// 20, and 4 ranks' all-to-all of 3 concurrent messages each way about
	// as long as recursive doubling's 2 rounds of one.
	CallOverhead float64
	// CreditWrites: a credit that cannot ride with data costs a message's
	// Overhead at both ends (a write of its own and its read), as the
	// executor and TCP transport do it (collectives' lazyCredit): the
	// credit of the last chunk of at most Inline bytes from a peer this
	// rank also sends to waits for that data and costs nothing of its
	// own; every other credit is written at once. Recursive doubling and
	// the pairwise all-to-all exchange with each partner and their
	// credits ride; a ring, Bruck's rounds and a broadcast's leaves send
	// them alone. false: credits cost no CPU (before 2 December, evening).
	CreditWrites bool
	// Coalesce: data messages a rank puts on the transport to one peer
	// in the same step (posted between two polls: a scatter's and an
	// allgather's segments to one rank, a step's chunks) leave in one
	// write and cost one Overhead at each end, as the TCP transport
	// writes them (one writev of the frames a caller posted between two
	// polls; one read takes the frames that came in together). Later
	// messages of the write cost their bytes only. Credits are charged
	// as CreditWrites says even where they share a write with data (the
	// transport does that too): the CPU per message that collsim's fit
	// takes from the 2-rank ring's CPU time, which counts the ranks'
	// polling, then doubles, twice what crowded ranks that do not poll
	// spend (tried on 3 December; see collsim's README). false: every
	// message costs its Overhead.
	Coalesce bool
	// OneThread: a rank's executor and both sides of its transport run
	// on one thread, each task after the one before, as goccl's TCP
	// transport drives them: the caller waiting for the call writes its
	// posts and polls its sockets itself, and does one at a time (false:
	// the executor, the sending side and the receiving side are threads
	// of their own, which a rank's posts and reads can overlap on
	// another core).
	OneThread bool
	// Oversubscribed says what ranks sharing cores cost, by ranks per
	// core, in increasing order of RanksPerCore. A pool with more ranks
	// than cores takes Switch and Gap interpolated linearly in its ranks
	// per core between the entries around it (the nearest entry's beyond
	// them); every rank having a core costs neither.
	Oversubscribed []Oversub
}

// Oversub is what ranks sharing cores cost at RanksPerCore ranks per core:
//
//   - Switch: CPU seconds added to a message's overhead at each end where
//     it finds that side of the transport idle, the process switch its
//     arrival or departure then costs (the woken rank displaces another,
//     with cold caches), which an idle core does not charge; messages that
//     queue behind one in progress (several posted at once, arrivals while
//     the receiving side is busy) do not pay it again;
//   - Gap: seconds a core loses on every task it runs, to the scheduler's
//     switches that leave cores idle while runnable work waits, time no
//     rank's CPU time shows;
//   - Latency: seconds added to every message's Alpha (data, credits and
//     acknowledgements): the wait of a woken rank for a core, which
//     matters where ranks wait on each other rather than on the CPU;
//   - NetLatency: seconds added besides Latency to every message between
//     hosts: in a validation run whose hosts are network namespaces of
//     one machine, a message between them passes two veth pairs, a bridge
//     and two token-bucket shapers, in the kernel's softirq work, which
//     on crowded cores waits behind the ranks like any other work.
//     Measured here (TCP, 4 hosts x 2 ranks on 2 cores, 3 December):
//     binomial broadcasts and all-to-alls up to 8 KiB took 1.4x the time
//     the one-host costs predict, whose messages stay on loopback; the
//     ring, whose ranks all have work, as predicted.
//   - ByteCost: the factor on the CPU costs per byte of copies
//     (reductions, copies, the transport's copies; 0 or 1: none): more
//     ranks' buffers and staging than cores share the caches, and a rank
//     switched out mid-chunk comes back to cold ones. Measured here (TCP,
//     8 ranks on 2 cores, ring allreduce of 4 MiB): 13.5 ms where the
//     costs of 2 ranks alone on the cores predict 9.1. A link between
//     hosts has it on the local link's PerByte (the transport's copies)
//     and not on what it costs per byte beyond that (the kernel's way
//     between hosts: in the validation's network namespaces, 3.4 times
//     loopback's cost per byte): fitted on one host, the factor on all
//     of it put 16 ranks on 4 hosts at 10 Gbit/s (ring allreduce, 1-4
//     MiB) at 1.7-1.9 times the measured time (3 December).
//   - Wake: seconds a message waits before a rank that has nothing to do
//     takes it up, for every other rank of its pool that waits in the
//     call too, per core, when a core of the pool has no work: the ranks
//     that wait poll their sockets in turn and yield the idle cores to
//     one another (a turn, a poll and a switch, took 7.5 us here), so the
//     more of them, the longer the one whose message came waits for its
//     turn. Where the cores have work (a ring's steps) the rank queues
//     for a core like any task; along a chain of dependent steps
//     (a tree, a pipelined broadcast, a ring with fewer elements than
//     ranks) most ranks wait, and each step pays it. Measured here (TCP,
//     8 ranks on 2 cores, one host, 256 B): the tree allreduce took 714
//     us, which the other costs fitted the same morning put at 254.
type Oversub struct {
	RanksPerCore float64 `json:"ranks_per_core"`
	Switch       float64 `json:"switch"`
	Gap          float64 `json:"gap"`
	Latency      float64 `json:"latency"`
	ByteCost     float64 `json:"byte_cost,omitempty"`
	Wake         float64 `json:"wake,omitempty"`
	NetLatency   float64 `json:"net_latency,omitempty"`
}

// oversub is the costs at k ranks per core.
func (p *Params) oversub(k float64) Oversub {
	o := p.Oversubscribed
	if k <= 1 || len(o) == 0 {
		return Oversub{}
	}
	if k <= o[0].RanksPerCore {
		return o[0]
	}
	for i := 1; i < len(o); i++ {
		if k <= o[i].RanksPerCore {
			f := (k - o[i-1].RanksPerCore) / (o[i].RanksPerCore - o[i-1].RanksPerCore)
			mix := func(a, b float64) float64 { return a + f*(b-a) }
			a, b := o[i-1], o[i]
			return Oversub{RanksPerCore: k, Switch: mix(a.Switch, b.Switch), Gap: mix(a.Gap, b.Gap), Latency: mix(a.Latency, b.Latency),
				ByteCost: mix(max(1, a.ByteCost), max(1, b.ByteCost)), Wake: mix(a.Wake, b.Wake), NetLatency: mix(a.NetLatency, b.NetLatency)}
		}
	}
	return o[len(o)-1]
}

func (p *Params) validate() error {
	if p.ChunkBytes <= 0 || p.Slots <= 0 {
		return fmt.Errorf("simulate: chunk size %d and slots %d must be positive", p.ChunkBytes, p.Slots)
	}
	for c, l := range p.Links {
		if l.Alpha < 0 || l.Beta < 0 || l.Overhead < 0 || l.PerByte < 0 || l.Burst < 0 || l.WriteTail < 0 {
			return fmt.Errorf("simulate: negative cost on %s links: %+v", collectives.LinkClass(c), l)
		}
	}
	if p.Gamma < 0 || p.Copy < 0 || p.Inline < 0 || p.CallOverhead < 0 {
		return fmt.Errorf("simulate: negative gamma, copy, inline size or call overhead")
	}
	for i, o := range p.Oversubscribed {
		if o.RanksPerCore <= 1 || o.Switch < 0 || o.Gap < 0 || o.Latency < 0 || o.ByteCost < 0 || o.Wake < 0 || o.NetLatency < 0 || (i > 0 && o.RanksPerCore <= p.Oversubscribed[i-1].RanksPerCore) {
			return fmt.Errorf("simulate: oversubscription costs %+v: want ranks per core above 1, increasing, and costs not negative", p.Oversubscribed)
		}
	}
	return nil
}

// SelectorModel is the α-β-γ model the selector would price with on these
// links: per message, the latency and both ends' overheads; per byte, the
// port and both ends' copies (what a two-point fit of one algorithm on the
// link class measures, as comm's tuning does).
func (p *Params) SelectorModel() collectives.Model {
	var m collectives.Model
	for c, l := range p.Links {
		m.Links[c] = collectives.LinkCost{Alpha: l.Alpha + 2*l.Overhead, Beta: l.Beta + 2*l.PerByte + p.Copy}
	}
	m.Gamma, m.ChunkBytes = p.Gamma, p.ChunkBytes
	return m
}

// DefaultParams is goccl's executor with its defaults (512 KiB chunks, 8
// slots, TCP's 32 KiB inline sends) on the given links and CPU speeds.
func DefaultParams(local, net Link, gamma, copyCost float64) Params {
	var p Params
	p.Links[collectives.LinkLocal], p.Links[collectives.LinkNet] = local, net
	p.Gamma, p.Copy = gamma, copyCost
	p.ChunkBytes, p.Slots, p.Inline = 512<<10, 8, 32<<10
	return p
}
