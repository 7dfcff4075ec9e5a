package shm

import (
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

// connectOn makes an endpoint on each of d0 and d1 (completion queues q0,
// q1) and connects them (transporttest.ConnectPair).
func connectOn(t testing.TB, d0 *Device, q0 transport.CompletionQueue, d1 *Device, q1 transport.CompletionQueue) (*endpoint, *endpoint) {
	t.Helper()
	e0, err := d0.NewEndpoint(q0)
	if err != nil {
		t.Fatal(err)
	}
	e1, err := d1.NewEndpoint(q1)
	if err != nil {
		t.Fatal(err)
	}
	transporttest.ConnectPair(t, e0, e1)
	return e0.(*endpoint), e1.(*endpoint)
}

func testCQ(t testing.TB, d *Device) transport.CompletionQueue {
	t.Helper()
	q, err := d.NewCompletionQueue(1024)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// mapped reports whether e has mapped its peer's segment id.
func mapped(e *endpoint, id uint64) bool {
	e.segMu.Lock()
	defer e.segMu.Unlock()
	return e.segs[id] != nil
}

// TestSegmentsOnDemand: a segment of Alloc'd memory goes to the peers that
// reach a region in it, when they first do, and to no other: registering
// it sends nothing, and connecting sends no segment either. (A large job's
// all-to-all makes a link and a staging segment per peer and window; when
// every registration went to every connected peer and every connection
// received every segment, a rank of 512 on one host spent most of its time
// sending, mapping and unmapping segments it never used.) Deregistering
// the last region of the segment makes the peers that have it unmap it.
func TestSegmentsOnDemand(t *testing.T) {
	o := testOptions(t)
	o.noSelf = true
	a, b, c := newTestDevice(t, o), newTestDevice(t, o), newTestDevice(t, o)
	t.Cleanup(func() { a.Close(); b.Close(); c.Close() })
	qa, qb, qc := testCQ(t, a), testCQ(t, b), testCQ(t, c)
	// An older segment, registered before the connections.
	old, err := Alloc(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	rOld, err := b.Register(old, transport.AccessAll)
	if err != nil {
		t.Fatal(err)
	}
	ea, eba := connectOn(t, a, qa, b, qb)
	ec, ebc := connectOn(t, c, qc, b, qb)
	const n = 64 << 10
	mem, err := Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := b.Register(mem, transport.AccessAll)
	if err != nil {
		t.Fatal(err)
	}
	seg, oldSeg := rb.(*region).seg.id, rOld.(*region).seg.id
	time.Sleep(50 * time.Millisecond) // a frame sent anyway would be mapped by now
	for _, e := range []*endpoint{ea, ec} {
		if mapped(e, seg) || mapped(e, oldSeg) {
			t.Fatalf("a peer mapped a segment it never reached (segments %d, %d)", seg, oldSeg)
		}
	}

	// a writes into the region: its endpoint asks for the segment, copies
	// through cross-memory attach meanwhile, and maps it.
	src := transporttest.Pattern(n, 5)
	ra := transporttest.Register(t, a, src, transport.AccessAll)
	for i := range 3 {
		if err := ea.PostWrite(uint64(i), ra, 0, n, rb.Remote(), 0, nil); err != nil {
			t.Fatal(err)
		}
		transporttest.ExpectOK(t, transporttest.WaitOne(t, qa, transporttest.ShortTimeout), transport.OpWrite, uint64(i), n)
	}
	transporttest.ExpectBytes(t, "written into the shared region", mem, src)
	deadline := time.Now().Add(10 * time.Second)
	for !mapped(ea, seg) {
		if time.Now().After(deadline) {
			t.Fatalf("the writer did not map the segment of the region it writes (paths %v)", pathCounts(ea))
		}
		time.Sleep(time.Millisecond)
	}
	if err := ea.PostWrite(9, ra, 0, n, rb.Remote(), 0, nil); err != nil {
		t.Fatal(err)
	}
	transporttest.ExpectOK(t, transporttest.WaitOne(t, qa, transporttest.ShortTimeout), transport.OpWrite, 9, n)
	if ea.paths[pathDirect].Load() == 0 {
		t.Fatalf("no direct write once the segment is mapped (paths %v)", pathCounts(ea))
	}
	if mapped(ea, oldSeg) || mapped(ec, seg) || mapped(ec, oldSeg) {
		t.Fatalf("a segment went to a peer that did not reach it")
	}
	eba.ctlMu.Lock()
	_, toA := eba.sent[seg]
	eba.ctlMu.Unlock()
	ebc.ctlMu.Lock()
	toC := len(ebc.sent)
	ebc.ctlMu.Unlock()
	if !toA || toC != 0 {
		t.Fatalf("sent to a: %v, to c: %d segments; want the segment to a only", toA, toC)
	}

	// The region's revocation makes a unmap the segment.
	if err := b.Deregister(rb); err != nil {
		t.Fatal(err)
	}
	for mapped(ea, seg) {
		if time.Now().After(deadline) {
			t.Fatalf("the peer still maps the segment after its last region was revoked")
		}
		time.Sleep(time.Millisecond)
	}
	if err := Free(mem); err != nil {
		t.Fatal(err)
	}
	b.Deregister(rOld)
	Free(old)
}
