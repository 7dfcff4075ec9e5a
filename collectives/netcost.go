package collectives

// NIC bytes: what the busiest host's network link carries out of the host,
// when the ranks are placed rph per host (ranks 0..rph-1 on the first host,
// and so on) and a host's ranks share its link. Algo.Cost counts the bytes
// of the busiest rank, as if every rank had a link of its own; on hosts of
// several ranks the shared link is often the bottleneck instead: the ring
// crosses each host boundary once, so a host's link carries one rank's
// bytes, while recursive doubling and Rabenseifner send every rank's bytes
// across in their far rounds, rph ranks' worth through one link.
// TestNetBytesMatchesSchedules checks each function against the schedules.

// busiestNIC is the most any host sends to other hosts: out(v, lo, hi) is
// what rank v sends to ranks outside [lo, hi), its host. Every host is
// summed when there are at most 64, else a sample (the first three, the
// middle, the last two): the algorithms here load their hosts alike or
// most at the first (the root's, the ranks standing for extras) and the
// last (the mirrored tree's root).
func busiestNIC(p, rph int, out func(v, lo, hi int) float64) float64 {
	if rph <= 0 || rph >= p {
		return 0
	}
	hosts := (p + rph - 1) / rph
	sample := []int{0, 1, 2, hosts / 2, hosts - 2, hosts - 1}
	if hosts <= 64 {
		sample = sample[:0]
		for h := range hosts {
			sample = append(sample, h)
		}
	}
	most := 0.0
	for _, h := range sample {
		if h < 0 || h >= hosts {
			continue
		}
		lo, hi := h*rph, min(p, (h+1)*rph)
		sum := 0.0
		for v := lo; v < hi; v++ {
			sum += out(v, lo, hi)
		}
		most = max(most, sum)
	}
	return most
}

func off(u, lo, hi int) bool { return u < lo || u >= hi }

func netRecursiveDoubling(p, rph int, n float64) float64 {
	p2 := pow2Below(p)
	extra := p - p2
	return busiestNIC(p, rph, func(v, lo, hi int) float64 {
		if v >= p2 {
			if off(v-p2, lo, hi) {
				return n
			}
			return 0
		}
		b := 0.0
		for d := 1; d < p2; d <<= 1 {
			if off(v^d, lo, hi) {
				b += n
			}
		}
		if v < extra && off(v+p2, lo, hi) {
			b += n
		}
		return b
	})
}

func netRabenseifner(p, rph int, n float64) float64 {
	p2 := pow2Below(p)
	extra := p - p2
	return busiestNIC(p, rph, func(v, lo, hi int) float64 {
		if v >= p2 {
			if off(v-p2, lo, hi) {
				return n
			}
			return 0
		}
		b := 0.0
		for d := 1; d < p2; d <<= 1 {
			if off(v^d, lo, hi) {
				b += 2 * n * float64(d) / float64(p2) // a round of the reduce-scatter, one of the allgather
			}
		}
		if v < extra && off(v+p2, lo, hi) {
			b += n
		}
		return b
	})
}

func netTree(p, rph int, n float64) float64 {
	var kids [2]int
	return busiestNIC(p, rph, func(v, lo, hi int) float64 {
		b := 0.0
		for t := range 2 {
			to, from := dtreeMap(p, t)
			if u := dtreeParent(p, v, t); u >= 0 && off(u, lo, hi) {
				b += n / 2 // the half reduced up
			}
			for _, c := range btreeChildren(p, to(v), kids[:0]) {
				if off(from(c), lo, hi) {
					b += n / 2 // the half broadcast down
				}
			}
		}
		return b
	})
}

// binomialChildren calls f for each child of relative rank v in the
// binomial tree over p ranks (root 0).
func binomialChildren(p, v int, f func(c int)) {
	for m := lowBit(v, pow2Ceil(p)) >> 1; m > 0; m >>= 1 {
		if v+m < p {
			f(v + m)
		}
	}
}

// The rooted algorithms are priced with root 0 (as Cost is).
func netBinomialBroadcast(p, rph int, n float64) float64 {
	return busiestNIC(p, rph, func(v, lo, hi int) float64 {
		b := 0.0
		binomialChildren(p, v, func(c int) {
			if off(c, lo, hi) {
				b += n
			}
		})
		return b
	})
}

func netScatterAllgather(p, rph int, n float64) float64 {
	sub := func(v int) int { return min(lowBit(v, pow2Ceil(p)), p-v) }
	seg := n / float64(p)
	return busiestNIC(p, rph, func(v, lo, hi int) float64 {
		b := 0.0
		binomialChildren(p, v, func(c int) {
			if off(c, lo, hi) {
				b += float64(sub(c)) * seg
			}
		})
		// The ring: every segment but the right neighbour's own and those
		// it already holds from the scatter (the root holds all).
		if right := (v + 1) % p; right != 0 && off(right, lo, hi) {
			b += float64(p-sub(right)) * seg
		}
		return b
	})
}

func netPairwise(p, rph int, n float64) float64 {
	return busiestNIC(p, rph, func(v, lo, hi int) float64 {
		return float64(p-(hi-lo)) * n / float64(p)
	})
}

func netBruckAlltoall(p, rph int, n float64) float64 {
	rounds := log2Ceil(p)
	slots := make([]float64, rounds)
	for k := range rounds {
		slots[k] = float64(bruckSlots(p, k))
	}
	block := n / float64(p)
	return busiestNIC(p, rph, func(v, lo, hi int) float64 {
		b := 0.0
		for k := range rounds {
			if off((v+1<<k)%p, lo, hi) {
				b += slots[k] * block
			}
		}
		return b
	})
}
