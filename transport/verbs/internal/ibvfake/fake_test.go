package ibvfake

import (
	"errors"
	"syscall"
	"testing"
	"unsafe"

	"github.com/goccl/goccl/transport/verbs/internal/ibv"
)

// rig is two connected queue pairs on two fake devices.
type rig struct {
	f      *Fabric
	ca, cb ibv.CQ
	a, b   ibv.QP
	pa, pb ibv.PD
}

func newRig(t *testing.T, depth int) *rig {
	t.Helper()
	f := New()
	da, db := f.AddDevice(DeviceConfig{}), f.AddDevice(DeviceConfig{})
	r := &rig{f: f}
	open := func(d *Device) (ibv.PD, ibv.CQ, ibv.QP) {
		ctx, err := f.Open(d.Name())
		if err != nil {
			t.Fatal(err)
		}
		pd, err := ctx.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		cq, err := ctx.NewCQ(depth)
		if err != nil {
			t.Fatal(err)
		}
		qp, err := pd.NewQP(cq, depth, depth, 64)
		if err != nil {
			t.Fatal(err)
		}
		if err := qp.Init(1, ibv.AccessRemoteWrite|ibv.AccessRemoteRead); err != nil {
			t.Fatal(err)
		}
		return pd, cq, qp
	}
	r.pa, r.ca, r.a = open(da)
	r.pb, r.cb, r.b = open(db)
	connect := func(q, peer ibv.QP, peerDev *Device, psn, peerPSN uint32) {
		if err := q.RTR(ibv.RTRAttr{Port: 1, DestQPN: peer.Num(), RQPSN: peerPSN, DGID: peerDev.cfg.GIDs[1].GID, Global: true, MTU: 1024}); err != nil {
			t.Fatal(err)
		}
		if err := q.RTS(ibv.RTSAttr{SQPSN: psn}); err != nil {
			t.Fatal(err)
		}
	}
	connect(r.a, r.b, db, 1, 2)
	connect(r.b, r.a, da, 2, 1)
	return r
}

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

func poll(t *testing.T, cq ibv.CQ, n int) []ibv.WC {
	t.Helper()
	wc := make([]ibv.WC, n+1)
	got, err := cq.Poll(wc)
	if err != nil || got != n {
		t.Fatalf("poll: %d completions (%v), want %d: %+v", got, err, n, wc[:got])
	}
	return wc[:n]
}

func TestSendRecvAndEvents(t *testing.T) {
	r := newRig(t, 8)
	src, dst := []byte("hello, fabric"), make([]byte, 32)
	ms, _ := r.pa.RegMR(addr(src), len(src), 0)
	md, _ := r.pb.RegMR(addr(dst), len(dst), ibv.AccessLocalWrite)
	// A send before the receive waits (RNR), then completes.
	if err := r.a.PostSend(ibv.SendWR{WRID: 7, Op: ibv.OpSend, Addr: addr(src), Len: len(src), LKey: ms.LKey()}); err != nil {
		t.Fatal(err)
	}
	poll(t, r.ca, 0)
	if err := r.b.PostRecv(9, addr(dst), len(dst), md.LKey()); err != nil {
		t.Fatal(err)
	}
	if w := poll(t, r.cb, 1)[0]; w.WRID != 9 || w.Status != ibv.WCSuccess || w.Opcode != ibv.WCOpRecv || int(w.ByteLen) != len(src) || string(dst[:len(src)]) != string(src) {
		t.Fatalf("receive %+v, data %q", w, dst)
	}
	if w := poll(t, r.ca, 1)[0]; w.WRID != 7 || w.Status != ibv.WCSuccess {
		t.Fatalf("send %+v", w)
	}
	// The queue was armed: one event, then none until re-armed.
	if ok, err := r.cb.ConsumeEvent(); !ok || err != nil {
		t.Fatalf("first event: %v, %v", ok, err)
	}
	if ok, _ := r.cb.ConsumeEvent(); ok {
		t.Fatal("a second event without a new completion")
	}
}

func TestRefusedWriteFailsBothSides(t *testing.T) {
	r := newRig(t, 8)
	src, win := make([]byte, 16), make([]byte, 16)
	ms, _ := r.pa.RegMR(addr(src), len(src), 0)
	mw, _ := r.pb.RegMR(addr(win), len(win), ibv.AccessLocalWrite|ibv.AccessRemoteRead)
	if err := r.b.PostRecv(1, addr(win), 4, mw.LKey()); err != nil {
		t.Fatal(err)
	}
	if err := r.a.PostSend(ibv.SendWR{WRID: 2, Op: ibv.OpWrite, Addr: addr(src), Len: 8, LKey: ms.LKey(), RemoteAddr: uint64(addr(win)), RKey: mw.RKey()}); err != nil {
		t.Fatal(err)
	}
	if w := poll(t, r.ca, 1)[0]; w.Status != ibv.WCRemAccessErr {
		t.Fatalf("initiator %+v, want remote access error", w)
	}
	if w := poll(t, r.cb, 1)[0]; w.WRID != 1 || w.Status != ibv.WCWRFlushErr {
		t.Fatalf("target %+v, want its receive flushed", w)
	}
	// Both queue pairs are in the error state: posts are flushed at once.
	if err := r.a.PostSend(ibv.SendWR{WRID: 3, Op: ibv.OpSend}); err != nil {
		t.Fatal(err)
	}
	if w := poll(t, r.ca, 1)[0]; w.WRID != 3 || w.Status != ibv.WCWRFlushErr {
		t.Fatalf("post in the error state %+v, want flushed", w)
	}
}

func TestOverrun(t *testing.T) {
	r := newRig(t, 2)
	// Each zero-length write completes at once and frees its send queue
	// slot, so all three posts succeed; the third completion does not fit.
	for i := range 3 {
		if err := r.a.PostSend(ibv.SendWR{WRID: uint64(i), Op: ibv.OpWrite}); err != nil {
			t.Fatal(err)
		}
	}
	wc := make([]ibv.WC, 4)
	if _, err := r.ca.Poll(wc); !errors.Is(err, syscall.EOVERFLOW) || r.f.Overruns() != 1 {
		t.Fatalf("a third completion on a queue of 2: poll %v, %d overruns; want EOVERFLOW, 1", err, r.f.Overruns())
	}
}

func TestLeaksRefused(t *testing.T) {
	r := newRig(t, 4)
	if err := r.pa.Close(); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("dealloc of a protection domain with a queue pair: %v, want EBUSY", err)
	}
	if err := r.ca.Close(); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("destroy of a completion queue with a queue pair: %v, want EBUSY", err)
	}
	if err := r.a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.ca.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.pa.Close(); err != nil {
		t.Fatal(err)
	}
	// The peer's sends now find nobody.
	if err := r.b.PostSend(ibv.SendWR{WRID: 5, Op: ibv.OpWrite}); err != nil {
		t.Fatal(err)
	}
	if w := poll(t, r.cb, 1)[0]; w.Status != ibv.WCRetryExcErr {
		t.Fatalf("write to a destroyed queue pair %+v, want retry exceeded", w)
	}
}
