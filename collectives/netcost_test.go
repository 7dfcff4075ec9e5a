package collectives

import (
	"github.com/goccl/goccl/internal/racetest"
	"math"
	"testing"
)

// TestNetBytesMatchesSchedules checks every algorithm's NetBytes against
// its schedules: on size ranks placed rph per host, the bytes each host's
// ranks send to ranks of other hosts, summed from every rank's steps; the
// busiest host's must be what NetBytes says, within rounding of uneven
// segments.
func TestNetBytesMatchesSchedules(t *testing.T) {
	racetest.SkipSequential(t)
	for c := Coll(1); c < numColls; c++ {
		for _, a := range Algos(c) {
			if a.NetBytes == nil {
				continue
			}
			for _, size := range []int{2, 3, 4, 5, 6, 7, 8, 12, 13, 16, 17, 24, 32, 33} {
				for _, rph := range []int{1, 2, 3, 4, 5, 8} {
					if rph >= size {
						continue
					}
					n := size * 720720 // the buffer, or all blocks
					count := n
					if c.Info().Blocked {
						count = n / size
					}
					hosts := (size + rph - 1) / rph
					sent := make([]float64, hosts)
					for r := range size {
						s := a.Schedule(r, size, &Args{Count: count, ElemSize: 1})
						for _, st := range s.Steps {
							if st.Kind == Send && st.Peer/rph != r/rph {
								sent[r/rph] += float64(st.Len)
							}
						}
					}
					want := 0.0
					for _, b := range sent {
						want = math.Max(want, b)
					}
					got := a.NetBytes(size, rph, float64(n))
					if math.Abs(got-want) > 1e-6*float64(n)+float64(size*size) { // an element per segment and step
						t.Errorf("%s %s on %d ranks, %d per host: NetBytes %.0f, schedules %.0f", c, a.Name, size, rph, got, want)
					}
				}
			}
		}
	}
}

// TestSelectPricesSharedLinks checks that the selector sees a host's
// ranks sharing its link: on 64 ranks, 8 per host, a large allreduce by
// Rabenseifner sends 8 ranks' far-round bytes through each link, the ring
// one rank's, so the ring wins; on 64 hosts of 1 rank they cost the same
// bytes and Rabenseifner's fewer steps win.
func TestSelectPricesSharedLinks(t *testing.T) {
	var m Model
	m.Links[LinkNet] = LinkCost{Alpha: 5e-6, Beta: 1 / 12.5e9}
	m.Gamma, m.ChunkBytes = 1/10e9, 512<<10
	a, prices, err := Select(CollAllreduce, 64<<20, Topology{Size: 64, Hosts: 8}, m, nil)
	if err != nil || a.Name != "ring" {
		t.Fatalf("64 ranks on 8 hosts: %v %v, want ring:%s", a, err, FormatPrices(prices))
	}
	a, prices, err = Select(CollAllreduce, 64<<20, Topology{Size: 64, Hosts: 64}, m, nil)
	if err != nil || a.Name != "rabenseifner" {
		t.Fatalf("64 ranks on 64 hosts: %v %v, want rabenseifner:%s", a, err, FormatPrices(prices))
	}
	if got := (Topology{Size: 10, Hosts: 3}).RanksPerHost(); got != 4 {
		t.Fatalf("10 ranks on 3 hosts: %d per host, want 4", got)
	}
}
