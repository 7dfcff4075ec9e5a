package osu

// Kind is the measurement a benchmark makes.
type Kind int

const (
	KindColl        Kind = iota // blocking collective: average latency
	KindNBC                     // non-blocking collective: overlap with compute
	KindLatency                 // ping-pong between 2 ranks
	KindBandwidth               // windowed streaming from rank 0 to rank 1
	KindBiBandwidth             // windowed streaming both ways
)

// Benchmark is one entry of the table: everything that differs between
// benchmarks is here; the runners are shared.
type Benchmark struct {
	Name  string // goccl name: "allreduce"
	OSU   string // OSU's program name: "osu_allreduce"
	Title string // OSU's title, without "OSU MPI"
	Kind  Kind
	Coll  string // the collective measured (key of the implementation table)
	// Many: sizes are per-rank blocks (alltoall, allgather, gather,
	// scatter), and -M divides by the number of ranks, as OSU does.
	Many    bool
	HasRoot bool
	HasOp   bool
	NoSize  bool // barrier: no size column
}

// Benchmarks is the table, in the order help lists them.
var Benchmarks = []*Benchmark{
	{Name: "latency", OSU: "osu_latency", Title: "Latency Test", Kind: KindLatency, Coll: "sendrecv"},
	{Name: "bw", OSU: "osu_bw", Title: "Bandwidth Test", Kind: KindBandwidth, Coll: "sendrecv"},
	{Name: "bibw", OSU: "osu_bibw", Title: "Bi-Directional Bandwidth Test", Kind: KindBiBandwidth, Coll: "sendrecv"},
	{Name: "allreduce", OSU: "osu_allreduce", Title: "Allreduce Latency Test", Kind: KindColl, Coll: "allreduce", HasOp: true},
	{Name: "bcast", OSU: "osu_bcast", Title: "Broadcast Latency Test", Kind: KindColl, Coll: "bcast", HasRoot: true},
	{Name: "reduce", OSU: "osu_reduce", Title: "Reduce Latency Test", Kind: KindColl, Coll: "reduce", HasRoot: true, HasOp: true},
	{Name: "alltoall", OSU: "osu_alltoall", Title: "All-to-All Personalized Exchange Latency Test", Kind: KindColl, Coll: "alltoall", Many: true},
	{Name: "allgather", OSU: "osu_allgather", Title: "Allgather Latency Test", Kind: KindColl, Coll: "allgather", Many: true},
	{Name: "reduce_scatter", OSU: "osu_reduce_scatter", Title: "Reduce_scatter Latency Test", Kind: KindColl, Coll: "reduce_scatter", HasOp: true},
	{Name: "gather", OSU: "osu_gather", Title: "Gather Latency Test", Kind: KindColl, Coll: "gather", Many: true, HasRoot: true},
	{Name: "scatter", OSU: "osu_scatter", Title: "Scatter Latency Test", Kind: KindColl, Coll: "scatter", Many: true, HasRoot: true},
	{Name: "gatherv", OSU: "osu_gatherv", Title: "Gatherv Latency Test", Kind: KindColl, Coll: "gatherv", Many: true, HasRoot: true},
	{Name: "scatterv", OSU: "osu_scatterv", Title: "Scatterv Latency Test", Kind: KindColl, Coll: "scatterv", Many: true, HasRoot: true},
	{Name: "barrier", OSU: "osu_barrier", Title: "Barrier Latency Test", Kind: KindColl, Coll: "barrier", NoSize: true},
	{Name: "iallreduce", OSU: "osu_iallreduce", Title: "Non-blocking Allreduce Latency Test", Kind: KindNBC, Coll: "allreduce", HasOp: true},
	{Name: "ibcast", OSU: "osu_ibcast", Title: "Non-Blocking Broadcast Latency Test", Kind: KindNBC, Coll: "bcast", HasRoot: true},
	{Name: "ialltoall", OSU: "osu_ialltoall", Title: "Non-blocking All-to-All Latency Test", Kind: KindNBC, Coll: "alltoall", Many: true},
}

// Lookup finds a benchmark by goccl name ("allreduce") or OSU name
// ("osu_allreduce").
func Lookup(name string) *Benchmark {
	for _, b := range Benchmarks {
		if b.Name == name || b.OSU == name {
			return b
		}
	}
	return nil
}
