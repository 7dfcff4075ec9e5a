package collectives

// Read-only views of a compiled Plan, for tools that replay what the
// executor would do without running it (the simulator of
// collectives/simulate). They expose exactly what the executor reads: each
// chunk's kind, peer, buffer range and number of dependencies, the chunks
// that wait for it, and the per-peer order of sends and receives. Slices
// returned here belong to the plan and must not be modified.

// ChunkInfo describes one chunk of a plan.
type ChunkInfo struct {
	Kind Kind
	// Peer is the rank the chunk is sent to or received from; -1 for a
	// Copy.
	Peer int
	Buf  Buf
	Off  int
	Len  int
	// SrcBuf and SrcOff are a Copy's source.
	SrcBuf Buf
	SrcOff int
	// Deps is how many earlier chunks of the plan must be done before this
	// one may run.
	Deps int
}

// Chunk describes chunk i (0 <= i < NumChunks()).
func (p *Plan) Chunk(i int) ChunkInfo {
	c := &p.chunks[i]
	return ChunkInfo{Kind: c.kind, Peer: int(c.peer), Buf: c.buf, Off: c.off, Len: c.len,
		SrcBuf: c.srcBuf, SrcOff: c.srcOff, Deps: int(c.nDeps)}
}

// Dependents lists the chunks that wait for chunk i (each counts i among
// its Deps).
func (p *Plan) Dependents(i int) []int32 { return p.dependents(int32(i)) }

// Sends lists the send chunks to peer in the order they leave.
func (p *Plan) Sends(peer int) []int32 {
	if peer < 0 || peer >= len(p.sends) {
		return nil
	}
	return p.sends[peer]
}

// Recvs lists the receive chunks from peer (Recv and RecvReduce) in the
// order they are matched with the peer's sends.
func (p *Plan) Recvs(peer int) []int32 {
	if peer < 0 || peer >= len(p.recvs) {
		return nil
	}
	return p.recvs[peer]
}

// Copies lists the Copy chunks in program order.
func (p *Plan) Copies() []int32 { return p.copies }

// PreCopies lists the local copies the rank makes before any chunk runs.
func (p *Plan) PreCopies() []PreCopy { return p.pre }
