package collectives

// Hierarchical allreduce: for jobs with several ranks on each of several
// hosts, the ranks of a host combine their buffers over the cheap local
// links (shared memory) and only one rank per host, or one rank per shard,
// crosses the network. Args.Hosts says where each rank is; without it (or
// on one host) the schedules are their flat counterparts on one host.
//
// Both schedules reduce every element in one fixed order and copy the
// result to every rank, so all ranks end with bitwise identical results.

// hostGroups returns the ranks of each host in rank order, hosts ordered
// by their lowest rank, and which host and local index each rank has.
// hosts[r] identifies rank r's host (any value; equal values share a
// host); nil or of the wrong length puts every rank on one host.
func hostGroups(size int, hosts []int) (groups [][]int, hostOf, localOf []int) {
	hostOf = make([]int, size)
	localOf = make([]int, size)
	if len(hosts) != size {
		g := make([]int, size)
		for r := range size {
			g[r], localOf[r] = r, r
		}
		return [][]int{g}, hostOf, localOf
	}
	index := map[int]int{}
	for r := range size {
		h, ok := index[hosts[r]]
		if !ok {
			h = len(groups)
			index[hosts[r]] = h
			groups = append(groups, nil)
		}
		hostOf[r], localOf[r] = h, len(groups[h])
		groups[h] = append(groups[h], r)
	}
	return groups, hostOf, localOf
}

// uniform reports whether every host holds the same number of ranks.
func uniform(groups [][]int) bool {
	for _, g := range groups {
		if len(g) != len(groups[0]) {
			return false
		}
	}
	return true
}

// appendOn appends sub, a schedule on len(peers) ranks, to s: sub's rank
// i is peers[i] and its BufData offsets are shifted by base.
func (s *Schedule) appendOn(sub Schedule, peers []int, base int) {
	for _, st := range sub.Steps {
		if st.Kind != Copy {
			st.Peer = peers[st.Peer]
		}
		if st.Buf == BufData {
			st.Off += base
		}
		if st.Kind == Copy && st.SrcBuf == BufData {
			st.SrcOff += base
		}
		s.Steps = append(s.Steps, st)
	}
}

// RunsAs names the algorithm whose schedule algo of c runs on size ranks
// placed on hosts (Args.Hosts): algo itself, but hier-ring's allreduce on
// hosts of unequal rank counts is hier-leader's (HierRingAllreduce), as
// the plan of such a call is named.
func RunsAs(c Coll, algo string, size int, hosts []int) string {
	if c == CollAllreduce && algo == "hier-ring" {
		if groups, _, _ := hostGroups(size, hosts); !uniform(groups) {
			return "hier-leader"
		}
	}
	return algo
}

// HierRingAllreduce is the hierarchical ring allreduce of count elements
// in place in BufData, for hosts of equal rank counts L (Args.Hosts): a
// ring reduce-scatter among the L ranks of each host cuts the buffer into
// L shards, local rank i holding shard i+1 reduced over its host; the
// ranks holding the same shard on the H hosts (one per host) allreduce it
// around a ring across the hosts; a ring allgather inside each host gives
// every rank the whole result. Each rank sends 2(L-1)/L of the buffer on
// local links and 2(H-1)/H of a shard on the network; a host's network
// link carries 2(H-1)/H of the buffer, as a flat ring's does, in 2(H-1)
// network steps instead of 2(HL-1). Hosts of unequal rank counts get
// HierLeaderAllreduce.
func HierRingAllreduce(rank, size int, a *Args) Schedule {
	groups, hostOf, localOf := hostGroups(size, a.Hosts)
	if !uniform(groups) {
		s := HierLeaderAllreduce(rank, size, a)
		s.Name = "hier-leader" // what the call ran, for Request.Algorithm and errors
		return s
	}
	s := Schedule{Rank: rank, Size: size}
	count, elem := a.Count, a.ElemSize
	if size <= 1 || count == 0 {
		return s
	}
	local := groups[hostOf[rank]]
	L, me := len(local), localOf[rank]
	s.appendOn(ringReduceScatterPhase(me, L, count, elem), local, 0)
	// Shard (me+1) mod L is this rank's; the ranks of the same local
	// index on every host hold the same shard.
	off, n := segment(count, elem, L, mod(me+1, L))
	if len(groups) > 1 && n > 0 {
		cross := make([]int, len(groups))
		for h, g := range groups {
			cross[h] = g[me]
		}
		s.appendOn(RingAllreduce(hostOf[rank], len(groups), n/elem, elem), cross, off)
	}
	s.appendOn(ringAllgatherPhase(me, L, count, elem), local, 0)
	return s
}

// HierLeaderAllreduce is the hierarchical allreduce for small buffers: the
// ranks of each host send their buffers to the host's first rank (its
// leader), which reduces them in rank order; the leaders run the
// recursive-doubling allreduce across hosts; each leader sends the result
// to its host's ranks. Two local message steps and ceil(log2 H) network
// rounds (two more when H is not a power of two) instead of the flat
// recursive doubling's log2(HL) rounds over the network.
func HierLeaderAllreduce(rank, size int, a *Args) Schedule {
	s := Schedule{Rank: rank, Size: size}
	n := a.Count * a.ElemSize
	if size <= 1 || n == 0 {
		return s
	}
	groups, hostOf, _ := hostGroups(size, a.Hosts)
	local := groups[hostOf[rank]]
	leader := local[0]
	if rank != leader {
		s.add(Send, leader, BufData, 0, n)
		s.add(Recv, leader, BufData, 0, n)
		return s
	}
	for _, r := range local[1:] {
		s.add(RecvReduce, r, BufData, 0, n)
	}
	if len(groups) > 1 {
		leaders := make([]int, len(groups))
		for h, g := range groups {
			leaders[h] = g[0]
		}
		s.appendOn(RecursiveDoublingAllreduce(hostOf[rank], len(groups), a.Count, a.ElemSize), leaders, 0)
	}
	for _, r := range local[1:] {
		s.add(Send, r, BufData, 0, n)
	}
	return s
}

// linkCosts is the local and network link costs of m, each standing in
// for the other when not measured.
func (m *Model) linkCosts() (local, net LinkCost) {
	local, net = m.Links[LinkLocal], m.Links[LinkNet]
	if !local.known() {
		local = net
	}
	if !net.known() {
		net = local
	}
	return local, net
}

// hierShape is the hosts and ranks per host of t where a hierarchical
// algorithm applies: several hosts of several ranks.
func hierShape(t Topology) (hosts, perHost int, ok bool) {
	if t.Hosts <= 1 || t.Size <= t.Hosts {
		return 0, 0, false
	}
	return t.Hosts, t.RanksPerHost(), true
}

// priceHierRing: 2(L-1) local steps moving 2(L-1)/L of the buffer, then
// 2(H-1) network steps in which the host's link carries 2(H-1)/H of it
// (its L shards), reducing (L-1)/L of the buffer and (H-1)/H of a shard.
func priceHierRing(n float64, t Topology, m Model) (float64, bool) {
	H, L, ok := hierShape(t)
	if !ok || t.Uneven {
		return 0, false
	}
	lo, net := m.linkCosts()
	h, l := float64(H), float64(L)
	sec := 2*(l-1)*lo.Alpha + 2*(l-1)/l*n*lo.Beta +
		2*(h-1)*net.Alpha + 2*(h-1)/h*n*net.Beta +
		((l-1)/l*n+(h-1)/h*n/l)*m.Gamma
	return sec, true
}

// priceHierLeader: the leader receives and reduces L-1 buffers and sends
// L-1, around recursive doubling among H leaders.
func priceHierLeader(n float64, t Topology, m Model) (float64, bool) {
	H, L, ok := hierShape(t)
	if !ok {
		return 0, false
	}
	lo, net := m.linkCosts()
	_, fold, lg := foldCost(H)
	l := float64(L)
	rounds := float64(lg + fold)
	sec := 2*(l-1)*(lo.Alpha+n*lo.Beta) +
		rounds*net.Alpha + float64(lg+fold/2)*n*net.Beta +
		((l-1)*n+float64(lg+fold/2)*n)*m.Gamma
	return sec, true
}

// HierBroadcast is the hierarchical broadcast from a.Root for several
// ranks on each of several hosts (Args.Hosts): a binomial tree among one
// rank per host (the root on its own host, the lowest rank on the others)
// crosses the network, then a binomial tree inside each host from that
// rank. Both trees are pipelined chunk by chunk, so a host's first rank
// forwards a chunk to its host while the next one crosses the network.
// ceil(log2 H) network steps and ceil(log2 L) local ones, where the flat
// binomial tree takes ceil(log2 HL) steps that may all cross the network.
func HierBroadcast(rank, size int, a *Args) Schedule {
	s := Schedule{Rank: rank, Size: size}
	count, elem := a.Count, a.ElemSize
	if size <= 1 || count*elem == 0 {
		return s
	}
	groups, hostOf, localOf := hostGroups(size, a.Hosts)
	rootHost := hostOf[a.Root]
	leaders := make([]int, len(groups))
	for h, g := range groups {
		leaders[h] = g[0]
	}
	leaders[rootHost] = a.Root
	h := hostOf[rank]
	if rank == leaders[h] && len(groups) > 1 {
		s.appendOn(BinomialBroadcast(h, len(groups), rootHost, count, elem), leaders, 0)
	}
	local := groups[h]
	s.appendOn(BinomialBroadcast(localOf[rank], len(local), localOf[leaders[h]], count, elem), local, 0)
	return s
}

// priceHierBroadcast: ceil(log2 H) network steps, then ceil(log2 L) local
// ones, each moving the buffer.
func priceHierBroadcast(n float64, t Topology, m Model) (float64, bool) {
	H, L, ok := hierShape(t)
	if !ok {
		return 0, false
	}
	lo, net := m.linkCosts()
	sec := float64(log2Ceil(H))*(net.Alpha+n*net.Beta) + float64(log2Ceil(L))*(lo.Alpha+n*lo.Beta)
	return sec, true
}
