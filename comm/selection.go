package comm

import "github.com/goccl/goccl/collectives"

// selection is how a communicator picks a call's algorithm: the choices
// Options.Algorithms (GOCCL_ALGO) forces, the cost model's parameters,
// and the choices the model made, cached per collective and size.
//
// algoForced is fixed at New. alpha and beta (the flat α-β model), gamma
// (seconds per byte reduced) and linkCost (α and β per link class,
// measured on communicators that span hosts; zero: alpha and beta price
// every link) are set at New, by tune before the first user call, and
// read-only after: any goroutine may price with them (Comm.pick,
// Comm.CostModel, Split). choices and prices (the selector's scratch)
// belong to whichever goroutine runs a request (one at a time, see
// callQueue): the worker, or a blocking call running inline.
type selection struct {
	algoForced map[collKind]string
	choices    map[choiceKey]string
	// The last two choices looked up, most recent first, in front of the
	// map (see callState's recent); an empty name is no entry. The two
	// caches are written out each for its key: one generic cache for both
	// took 5-15% longer per call (BenchmarkCallOverhead/broadcast+barrier:
	// its key comparison is not inlined).
	recent      [2]recentChoice
	prices      []collectives.Price
	alpha, beta float64
	gamma       float64
	linkCost    [collectives.NumLinkClasses]collectives.LinkCost
	// algoBeta: β measured per algorithm at New (collectives.Model.AlgoBeta).
	algoBeta map[collKind]map[string]float64
	// crowded: every rank on one host, more of them than its processors,
	// or ranks told to yield (Options.YieldWhenIdle "1": processors shared
	// across hosts too) (collectives.Model.Crowded).
	crowded bool
}

// choiceKey caches the selector's choice per collective and size (the
// cost model is fixed once the communicator has measured it).
type choiceKey struct {
	kind   collKind
	nbytes int
}

// recentChoice is an entry of selection.recent.
type recentChoice struct {
	key  choiceKey
	name string
}

// maxChoices bounds the cache of choices: past it, it starts over.
const maxChoices = 4096

// newSelection returns a selection with GOCCL_ALGO's forced choices and
// an empty cache; the cost model is set by tune.
func newSelection(forced map[collKind]string) selection {
	return selection{algoForced: forced, choices: map[choiceKey]string{}}
}

// forcedFor is the algorithm a call of k must use whatever the cost
// model says: the call's own (own), else GOCCL_ALGO's; "" if neither.
func (s *selection) forcedFor(k collKind, own string) string {
	if own != "" || len(s.algoForced) == 0 { // no map lookup on every small call
		return own
	}
	return s.algoForced[k]
}

// cachedChoice returns the cost model's choice for k on nbytes, if made.
func (s *selection) cachedChoice(k collKind, nbytes int) (string, bool) {
	key := choiceKey{k, nbytes}
	if r := &s.recent[0]; r.name != "" && key == r.key {
		return r.name, true
	}
	if r := s.recent[1]; r.name != "" && key == r.key {
		s.recent[1] = s.recent[0]
		s.recent[0] = r
		return r.name, true
	}
	name, ok := s.choices[key]
	if ok {
		s.noteRecent(key, name)
	}
	return name, ok
}

// noteRecent puts key's choice in front of the recent ones.
func (s *selection) noteRecent(key choiceKey, name string) {
	s.recent[1] = s.recent[0]
	s.recent[0] = recentChoice{key, name}
}

// rememberChoice caches the cost model's choice for k on nbytes.
func (s *selection) rememberChoice(k collKind, nbytes int, name string) {
	if len(s.choices) >= maxChoices {
		clear(s.choices)
	}
	s.choices[choiceKey{k, nbytes}] = name
	s.noteRecent(choiceKey{k, nbytes}, name)
}

// forgetChoices drops the cached choices (priced with another model).
func (s *selection) forgetChoices() {
	clear(s.choices)
	s.recent = [2]recentChoice{}
}

// priceAll prices k's algorithms on nbytes with model m and returns the
// cheapest, and the prices (the selector's scratch, valid until the next
// call; none when k has one algorithm). It does not cache the choice.
func (s *selection) priceAll(k collKind, nbytes int, t collectives.Topology, m collectives.Model) (*collectives.Algo, []collectives.Price, error) {
	a, prices, err := collectives.Select(k, nbytes, t, m, s.prices[:0])
	s.prices = prices[:0]
	return a, prices, err
}

// modelFor is the selector's cost model with the executor's chunk size:
// the α and β measured at New on the transport in use (per link class
// when measured so) and the kernel's γ.
func (s *selection) modelFor(chunkBytes int) collectives.Model {
	m := collectives.Model{Gamma: s.gamma, ChunkBytes: chunkBytes, AlgoBeta: s.algoBeta, Crowded: s.crowded}
	m.Links = s.linkCost
	if m.Links == ([collectives.NumLinkClasses]collectives.LinkCost{}) {
		m.Links[collectives.LinkLocal] = collectives.LinkCost{Alpha: s.alpha, Beta: s.beta}
	}
	return m
}
