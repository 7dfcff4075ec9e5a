package comm

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/goccl/goccl/transport/tcp"
)

// The range of Options.ChunkSize (GOCCL_CHUNK_SIZE). Below it a chunk
// costs more in per-message overhead than it carries; above it the staging
// slots (Slots chunks per peer) take more memory than they can use.
const (
	MinChunkSize = 1 << 10
	MaxChunkSize = 64 << 20
)

// Options tune a communicator. The zero value is the default.
//
// Init, New and NewWith read the environment once, through OptionsFromEnv:
// a field left zero takes its variable's value if the variable is set (see
// Environment for the variables and their defaults); a field that is set
// wins over the environment. Nothing below them reads the environment.
type Options struct {
	// ChunkSize is the pipelining unit and staging slot size in bytes
	// (default 512 KiB, env GOCCL_CHUNK_SIZE), from MinChunkSize to
	// MaxChunkSize (others are refused), rounded down to a multiple of 64.
	ChunkSize int
	// Slots is the number of staging slots per peer: chunks in flight per
	// link (default 8, env GOCCL_SLOTS).
	Slots int
	// Timeout bounds every collective that is not given a context deadline
	// (default 10 minutes, env GOCCL_TIMEOUT). The measurement of the
	// transport at New is bounded by the longer of it and StallTimeout.
	Timeout time.Duration
	// StallTimeout fails a collective that sees no completion at all for
	// this long (default 60 s, env GOCCL_STALL_TIMEOUT): the liveness check
	// that holds whatever the transport, for a peer or link that stops
	// without an error (a stalled process, a black-holed path).
	StallTimeout time.Duration
	// SpinPolls is how many empty polls precede a blocking wait (default 64,
	// env GOCCL_SPIN_POLLS; Init makes it 1 when the ranks of the host
	// outnumber its cores). Transports whose Wait spins itself (TCP: see
	// SpinTime) ignore it.
	SpinPolls int
	// YieldWhenIdle says whether a rank that waits yields the processor
	// between looks instead of spinning (Open MPI's mpi_yield_when_idle):
	// "1" always, "0" never, "" or "auto" when the ranks of its host
	// outnumber the host's processors (env GOCCL_YIELD_WHEN_IDLE). Say 1
	// where the processors are shared with more than the host's ranks: jobs
	// whose "hosts" are containers or network namespaces of one machine, or
	// other busy jobs on the node. Spinning there takes the processor from
	// the rank that would send what the spinner waits for. A yield reaches
	// only tasks of the same scheduling group: with the kernel's autogroup
	// scheduling, ranks started in sessions of their own (gorun over ssh
	// starts each so) do not yield to each other
	// (kernel.sched_autogroup_enabled=0 lifts it). "1" also tells the
	// selector that the ranks share processors on any number of hosts, as
	// a host whose ranks outnumber its processors does by itself: up to 4
	// ranks, the barrier is the linear one, which rank 0 leaves first.
	YieldWhenIdle string
	// OwnDevice makes Close close the transport device.
	OwnDevice bool
	// Alpha (seconds per message step) and Beta (seconds per byte) set the
	// algorithm selector's cost model. Zero: measured at New on the
	// transport in use.
	Alpha, Beta float64

	// StagingBudget bounds the staging memory of a rank, in bytes
	// (default DefaultStagingBudget, 64 MiB; env GOCCL_STAGING_BUDGET): a
	// job of so many ranks that Slots staging slots of ChunkSize bytes per
	// peer would exceed it, were every peer connected, gets fewer slots
	// per peer, and past two slots smaller chunks (see stagingGeometry).
	// Peers are connected, and their staging allocated, on first use, so a
	// ring or tree job allocates a few peers' worth of it. Every rank must
	// be given the same value, as with ChunkSize and Slots.
	StagingBudget int

	// PeerWindow is how many peers an all-to-all style collective (the
	// pairwise all-to-all and all-to-all-v) exchanges with at a time
	// (default DefaultPeerWindow, 16; env GOCCL_PEER_WINDOW; at least 2):
	// in a job of more ranks it goes through batches of at most
	// PeerWindow peers, connecting each batch's new peers when it reaches
	// them, so that a rank sets up, posts to and stages for a bounded set
	// of peers whatever the job size. Every rank must be given the same
	// value.
	PeerWindow int
	// MaxPeers is how many peers a rank keeps connected for later calls
	// (default DefaultMaxPeers, 64; env GOCCL_MAX_PEERS). In a job of at
	// most MaxPeers+1 ranks every link, once made, stays. In a larger job
	// the links an all-to-all makes for one batch of PeerWindow peers are
	// closed, and their staging freed, as soon as both ranks are done with
	// them (the next all-to-all connects them again, one set-up per pair
	// and call): a rank then holds at most PeerWindow such links, beside
	// the few its other algorithms keep (ring neighbours, tree and
	// recursive-doubling partners: O(log n)). Every rank must be given
	// the same value.
	MaxPeers int
	// NoShmBoard turns off the shared-memory board (board.go): the
	// collectives and point-to-point calls of ranks that are all on one
	// host then go through the executor's messages like the rest (env
	// GOCCL_SHM_BOARD=0). Every rank must agree.
	NoShmBoard bool
	// StrictChecks makes a rank that only sends in a rooted collective (a
	// broadcast or scatter root, a reduce or gather leaf) return only once
	// its receivers have checked its call (about one round trip more for a
	// small message; broadcasts and scatters of three or more ranks end
	// with a barrier), so that ranks that disagree on the call fail in that
	// very call, every one of them. Off (the default), such a rank returns
	// once its data is sent, as MPI's and NCCL's do: its receivers still
	// check every message, and a disagreement fails their call and a later
	// call of this rank (usually the next; in a run of small broadcasts
	// over shared memory, up to a ring of 128 of them later), or its Close
	// (env GOCCL_STRICT_CHECKS=1). Every rank must agree.
	StrictChecks bool

	// HostID identifies this rank's host: ranks with equal HostIDs are on
	// one host, reach each other over shared memory when a shm device is
	// given, and form the groups of hierarchical algorithms. Empty: the
	// identity of this process's host (transport/shm.HostID: boot id,
	// network, pid and user namespaces, uid).
	HostID string

	// Algorithms forces an algorithm per collective for every call that
	// does not name its own (WithAlgorithm), in GOCCL_ALGO's syntax:
	// "allreduce:tree,broadcast:pipeline" (canonical names, see
	// Algorithms). Empty: the selector's choice. Every rank must be given
	// the same value.
	Algorithms string
	// SIMD sets the reduction kernels of the whole process when a
	// communicator is created (env GOCCL_SIMD): "auto" (the best level of
	// the CPU), "off" (portable Go), "avx2" or "avx512" (collectives.SetSIMD);
	// an unknown value or a level the CPU lacks fails the creation. Empty
	// leaves the kernels as they are.
	SIMD string

	// Logger receives the communicator's log lines: which transports Init
	// opened and why (Info), the transports' warnings about refused or
	// dropped connections (Warn), and the debug lines (Debug: algorithm
	// choices, the cost model, connections, verbs devices) when the logger
	// is enabled for slog.LevelDebug. Default: slog.Default(), which
	// writes through the standard log package.
	Logger *slog.Logger
	// Debug (env GOCCL_DEBUG) makes Logger take the debug lines whatever
	// its level.
	Debug bool

	// The fields below configure the transports that Init opens; New and
	// NewWith take devices the caller opened and ignore them.

	// Transport chooses the transports (env GOCCL_TRANSPORT): "auto"
	// (default), "shm", "tcp" or "verbs"; see Init.
	Transport string
	// Bind has Init bind the process to its share of the host's CPUs
	// (env GOCCL_BIND), split among the ranks of the host as gorun's
	// --bind-to does: "auto", "core" or "none"/empty (leave it as
	// started). gorun sets it for the ranks it starts over ssh (it binds
	// those it starts itself before they run).
	Bind string
	// InitTimeout bounds joining the job when Init's context has no
	// deadline (default 5 minutes, env GOCCL_INIT_TIMEOUT).
	InitTimeout time.Duration
	// SocketInterface names the network interface whose IPv4 address the
	// TCP transport advertises (env GOCCL_SOCKET_IFNAME). Empty: the
	// address this rank reached the bootstrap store from (see Init).
	SocketInterface string
	// SocketTimeout is how long unacknowledged data may sit on a TCP
	// connection (TCP_USER_TIMEOUT) before the link is declared dead
	// (default 10 s, env GOCCL_SOCKET_TIMEOUT).
	SocketTimeout time.Duration
	// TCPCongestion is the congestion control of the TCP transport's
	// connections (env GOCCL_TCP_CONGESTION; see tcp.Options.Congestion):
	// empty, reno; "system", the system's default; else a name the
	// kernel knows.
	TCPCongestion string
	// SpinTime is how long a TCP wait polls its sockets while nothing
	// arrives before it sleeps in poll(2) (env GOCCL_SPIN_TIME; zero: the
	// TCP transport's default, tcp.Options.SpinTime); negative sleeps at
	// once.
	SpinTime time.Duration
	// IBHCA selects the verbs devices and ports (env GOCCL_IB_HCA), in
	// NCCL's syntax: see verbs.Config.HCA. Empty: every device.
	IBHCA string
	// IBGIDIndex, if not nil, forces the verbs GID table index (env
	// GOCCL_IB_GID_INDEX). Nil: chosen automatically (verbs.Config.GIDIndex).
	IBGIDIndex *int
}

// fill applies the defaults to the fields left zero and checks the
// values. It reads no environment: Init, New and NewWith applied it before.
func (o *Options) fill() error {
	if o.ChunkSize <= 0 {
		o.ChunkSize = defaultChunkSize
	}
	if err := checkChunkSize(o.ChunkSize); err != nil {
		return fmt.Errorf("Options.ChunkSize=%d: %w", o.ChunkSize, err)
	}
	o.ChunkSize &^= 63 // a multiple of every element size
	if err := tcp.CheckCongestion(o.TCPCongestion); err != nil {
		return fmt.Errorf("Options.TCPCongestion=%q: %w", o.TCPCongestion, err)
	}
	if o.Slots <= 0 {
		o.Slots = defaultSlots
	}
	o.Slots = min(o.Slots, 1<<15)
	if o.StagingBudget <= 0 {
		o.StagingBudget = DefaultStagingBudget
	}
	if o.PeerWindow <= 0 {
		o.PeerWindow = DefaultPeerWindow
	}
	if o.PeerWindow < 2 {
		return fmt.Errorf("Options.PeerWindow=%d: an all-to-all exchanges with at least 2 peers at a time", o.PeerWindow)
	}
	if o.MaxPeers <= 0 {
		o.MaxPeers = DefaultMaxPeers
	}
	if o.Timeout <= 0 {
		o.Timeout = defaultTimeout
	}
	if o.StallTimeout <= 0 {
		o.StallTimeout = defaultStallTimeout
	}
	if o.SpinPolls <= 0 {
		o.SpinPolls = defaultSpinPolls
	}
	switch o.YieldWhenIdle {
	case "":
		o.YieldWhenIdle = "auto"
	case "auto", "0", "1":
	default:
		return fmt.Errorf("Options.YieldWhenIdle=%q: want 1, 0 or auto", o.YieldWhenIdle)
	}
	if o.InitTimeout <= 0 {
		o.InitTimeout = defaultInitTimeout
	}
	if o.SocketTimeout <= 0 {
		o.SocketTimeout = defaultSocketTimeout
	}
	if o.Transport == "" {
		o.Transport = "auto"
	}
	if err := checkTransport(o.Transport); err != nil {
		return fmt.Errorf("Options.Transport=%q: %w", o.Transport, err)
	}
	o.Logger = resolveLogger(o.Logger, o.Debug)
	return nil
}

// The defaults of the fields fill sets (Environment lists them for the
// documentation; TestEnvironmentDefaults checks that both agree).
const (
	defaultChunkSize     = 512 << 10
	defaultSlots         = 8
	defaultTimeout       = 10 * time.Minute
	defaultStallTimeout  = time.Minute
	defaultSpinPolls     = 64
	defaultInitTimeout   = 5 * time.Minute
	defaultSocketTimeout = 10 * time.Second
)

func checkChunkSize(n int) error {
	if n < MinChunkSize || n > MaxChunkSize {
		return fmt.Errorf("the chunk size must be from %d (1 KiB) to %d (64 MiB) bytes", MinChunkSize, MaxChunkSize)
	}
	return nil
}

func checkTransport(t string) error {
	switch t {
	case "auto", "shm", "tcp", "verbs":
		return nil
	}
	return fmt.Errorf("want auto, shm, tcp or verbs")
}

// shmBoard reports whether the shared-memory board may be used.
func (o *Options) shmBoard() bool { return !o.NoShmBoard }
