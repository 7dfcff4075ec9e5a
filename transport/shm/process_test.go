package shm

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/logtest"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

// procSide is this process's end of a connection to a child.
type procSide struct {
	dev *Device
	cq  transport.CompletionQueue
	ep  *endpoint
	reg transport.Region
	mem []byte
}

func newProcSide(t testing.TB, o Options, size int) *procSide {
	t.Helper()
	s := &procSide{dev: newTestDevice(t, o)}
	t.Cleanup(func() { s.dev.Close() })
	s.cq = transporttest.NewCQ(t, s.dev)
	s.ep = transporttest.NewEndpoint(t, s.dev, s.cq).(*endpoint)
	mem, err := Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	s.mem = mem
	s.reg = transporttest.Register(t, s.dev, mem, transport.AccessAll)
	t.Cleanup(func() {
		s.dev.Close()
		if err := Free(mem); err != nil {
			t.Errorf("free: %v", err)
		}
	})
	return s
}

// TestTwoProcesses moves data both ways between this process and a child
// with each kind of target memory: Alloc'd (peers map it: one direct copy),
// a plain slice with cross-memory attach, and a plain slice through the
// ring. It checks the data and that each transfer took the expected path.
func TestTwoProcesses(t *testing.T) {
	cases := []struct {
		name     string
		childMem string
		cma      bool
		path     int
	}{
		{"Shared", "alloc", true, pathDirect},
		{"SharedNoCMA", "alloc", false, pathDirect},
		{"CMA", "heap", true, pathCMA},
		{"Staged", "heap", false, pathStaged},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := []string{"GOCCL_SHM_CHILD_MEM=" + tc.childMem}
			o := testOptions(t)
			if !tc.cma {
				env = append(env, "GOCCL_SHM_CHILD_CMA=0")
				o.DisableCMA = true
			}
			const size = 1 << 20
			c := startChild(t, env...)
			p := c.newEndpoint("p")
			s := newProcSide(t, o, size)
			connectChild(t, c, "p", p, s.ep, s.reg.Remote())
			if s.ep.cma != tc.cma {
				t.Fatalf("CMA detected %v, want %v", s.ep.cma, tc.cma)
			}
			if tc.path == pathDirect {
				// The first access asks for the child's segment (with
				// CMA it copies that way meanwhile); the ones below run
				// once it is mapped.
				awaitSegment(t, s.ep, p.rr)
			}
			c.send("ECHO p")
			const n = 256 << 10
			transporttest.Fill(s.mem[size/2:size/2+n], 7)
			if err := s.ep.PostRecv(100, s.reg, 0, 0); err != nil {
				t.Fatal(err)
			}
			// A write with immediate; the child writes the same bytes back
			// into our first half.
			imm := uint32(0xabc)
			if err := s.ep.PostWrite(1, s.reg, size/2, n, p.rr, 0, &imm); err != nil {
				t.Fatal(err)
			}
			cs := transporttest.ByID(t, transporttest.WaitN(t, s.cq, 2, transporttest.ShortTimeout))
			transporttest.ExpectOK(t, cs[1], transport.OpWrite, 1, n)
			transporttest.ExpectOK(t, cs[100], transport.OpRecv, 100, n)
			if !cs[100].HasImm || cs[100].Imm != imm {
				t.Fatalf("echo: %+v", cs[100])
			}
			transporttest.ExpectBytes(t, "echoed write", s.mem[:n], s.mem[size/2:size/2+n])
			// A read of the child's region, which holds our bytes.
			clear(s.mem[:n])
			if err := s.ep.PostRead(2, s.reg, 0, n, p.rr, 0); err != nil {
				t.Fatal(err)
			}
			transporttest.ExpectOK(t, transporttest.WaitOne(t, s.cq, transporttest.ShortTimeout), transport.OpRead, 2, n)
			transporttest.ExpectBytes(t, "read", s.mem[:n], s.mem[size/2:size/2+n])
			// A message of several chunks, sent back.
			clear(s.mem[:n])
			if err := s.ep.PostRecv(3, s.reg, 0, n); err != nil {
				t.Fatal(err)
			}
			if err := s.ep.PostSend(4, s.reg, size/2, n); err != nil {
				t.Fatal(err)
			}
			cs = transporttest.ByID(t, transporttest.WaitN(t, s.cq, 2, transporttest.ShortTimeout))
			transporttest.ExpectOK(t, cs[4], transport.OpSend, 4, n)
			transporttest.ExpectOK(t, cs[3], transport.OpRecv, 3, n)
			transporttest.ExpectBytes(t, "echoed message", s.mem[:n], s.mem[size/2:size/2+n])
			if got := s.ep.paths[tc.path].Load(); got != 2 {
				t.Fatalf("paths taken %v; want the write and the read on path %d", pathCounts(s.ep), tc.path)
			}
			if err := s.ep.Close(); err != nil {
				t.Fatal(err)
			}
			c.send("EXIT")
			c.expect("BYE", 10*time.Second)
		})
	}
}

func pathCounts(e *endpoint) []uint64 {
	out := make([]uint64, len(e.paths))
	for i := range e.paths {
		out[i] = e.paths[i].Load()
	}
	return out
}

// TestKillPeer kills a child (SIGKILL) that this process and a second
// child are connected to, with requests pending on both: every pending
// request of both survivors fails with ErrPeerClosed within a second, and
// nothing is left in /dev/shm.
func TestKillPeer(t *testing.T) {
	before := shmEntries(t)
	victim := startChild(t, "GOCCL_SHM_CHILD_MEM=heap")
	survivor := startChild(t)
	// The survivor child and the victim.
	sv := survivor.newEndpoint("v")
	vs := victim.newEndpoint("s")
	survivor.send("CONNECT v %s", vs)
	victim.send("CONNECT s %s", sv)
	survivor.expect("CONNECTED", 20*time.Second)
	victim.expect("CONNECTED", 20*time.Second)
	survivor.send("HOLD v")
	// This process and the victim.
	vp := victim.newEndpoint("p")
	s := newProcSide(t, testOptions(t), 1<<20)
	connectChild(t, victim, "p", vp, s.ep, s.reg.Remote())
	for i := range 4 {
		if err := s.ep.PostRecv(uint64(100+i), s.reg, i*64, 64); err != nil {
			t.Fatal(err)
		}
	}
	// The victim posts no receive: the send and the immediate wait in the
	// ring, their requests pending.
	if err := s.ep.PostSend(1, s.reg, 0, 1000); err != nil {
		t.Fatal(err)
	}
	imm := uint32(5)
	if err := s.ep.PostWrite(2, s.reg, 0, 64, vp.rr, 0, &imm); err != nil {
		t.Fatal(err)
	}
	transporttest.ExpectQuiet(t, s.cq, 20*time.Millisecond)
	killed := time.Now()
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	const bound = time.Second
	cs := transporttest.WaitN(t, s.cq, 6, 5*bound)
	took := time.Since(killed)
	for _, c := range cs {
		if !errors.Is(c.Err, transport.ErrPeerClosed) || !errors.Is(c.Err, transport.ErrFlushed) {
			t.Fatalf("pending request after the peer was killed: %v %d: %v; want ErrFlushed wrapping ErrPeerClosed", c.Op, c.ID, c.Err)
		}
	}
	if took > bound {
		t.Fatalf("this process's pending requests failed %v after the kill; want within %v", took, bound)
	}
	f := survivor.expect("FAILED", 5*bound)
	at, _ := strconv.ParseInt(f[2], 10, 64)
	if d := time.Unix(0, at).Sub(killed); d > bound {
		t.Fatalf("the other child's pending receive failed %v after the kill; want within %v", d, bound)
	}
	if !strings.Contains(strings.Join(f[3:], " "), transport.ErrPeerClosed.Error()) {
		t.Fatalf("the other child's receive failed with %q; want ErrPeerClosed", strings.Join(f[3:], " "))
	}
	t.Logf("survivors failed their pending requests %v (this process) and %v (child) after the kill", took, time.Unix(0, at).Sub(killed))
	if err := s.ep.PostSend(9, s.reg, 0, 8); !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("post after the peer was killed: %v; want ErrPeerClosed", err)
	}
	survivor.send("EXIT")
	survivor.expect("BYE", 10*time.Second)
	<-victim.done
	if after := shmEntries(t); !slicesEqual(before, after) {
		t.Fatalf("/dev/shm changed: before %v, after %v", before, after)
	}
}

// shmEntries lists /dev/shm entries that name goccl.
func shmEntries(t testing.TB) []string {
	t.Helper()
	ents, err := os.ReadDir("/dev/shm")
	if err != nil {
		t.Skipf("no /dev/shm to check: %v", err)
	}
	var out []string
	for _, e := range ents {
		if strings.Contains(strings.ToLower(e.Name()), "goccl") {
			out = append(out, e.Name())
		}
	}
	return out
}

func slicesEqual(a, b []string) bool { return strings.Join(a, "\n") == strings.Join(b, "\n") }

// TestCredentials runs a child as another user (nobody): a connection
// between it and this process is refused in whichever direction it is
// dialed, so it cannot map this process's memory.
func TestCredentials(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a child as another user")
	}
	const nobody = 65534
	// The child runs the test binary from a directory nobody can read.
	dir := t.TempDir()
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "shm.test")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, data, 0o755); err != nil {
		t.Fatal(err)
	}
	c := startChildExe(t, exe, func(cmd *exec.Cmd) {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	})
	// Connect from a device whose token sorts before the child's (this
	// process dials) and from one after it (the child dials).
	for i, dialer := range []bool{true, false} {
		name := "c" + strconv.Itoa(i)
		p := c.newEndpoint(name)
		var logMu sync.Mutex
		var logs bytes.Buffer
		o := testOptions(t)
		o.Logger = logtest.Func(func(format string, args ...any) {
			logMu.Lock()
			defer logMu.Unlock()
			logs.WriteString(strings.TrimSpace(sprintf(format, args...)) + "\n")
		})
		tok := [16]byte{15: 1} // sorts first
		if !dialer {
			tok = [16]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
		}
		o.token = &tok
		d := newTestDevice(t, o)
		q := transporttest.NewCQ(t, d)
		ep := transporttest.NewEndpoint(t, d, q)
		// The host identity includes the uid, so each side would refuse
		// the other's blob at once. A forged blob gets past that check: the
		// socket's credentials are what protects the memory. Give each side
		// a blob with its own host identity.
		mine := ep.LocalAddress()
		copy(mine[8:24], p.blob[8:24])
		theirs := append([]byte(nil), p.blob...)
		copy(theirs[8:24], d.host[:])
		c.send("CONNECT %s %s 2000", name, peerLine{blob: mine})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := ep.Connect(ctx, theirs)
		cancel()
		if err == nil {
			t.Fatalf("connection with a process of uid %d succeeded (this process dials: %v)", nobody, dialer)
		}
		if dialer && (!errors.Is(err, transport.ErrInvalid) || !strings.Contains(err.Error(), "uid "+strconv.Itoa(nobody))) {
			t.Fatalf("dialing a process of uid %d: %v; want ErrInvalid naming the uid", nobody, err)
		}
		f := c.expectLine(func(f []string) bool { return f[0] == "ERR" && f[1] == name }, 10*time.Second)
		var l string
		for start := time.Now(); time.Since(start) < 5*time.Second; time.Sleep(10 * time.Millisecond) {
			logMu.Lock()
			l = logs.String()
			logMu.Unlock()
			if dialer || strings.Contains(l, "uid "+strconv.Itoa(nobody)) {
				break
			}
		}
		if !dialer && !strings.Contains(l, "uid "+strconv.Itoa(nobody)) {
			t.Fatalf("the child dialed; this device logged %q, want a refusal naming uid %d", l, nobody)
		}
		t.Logf("this process dials: %v; here: %v; child: %s", dialer, err, strings.Join(f[2:], " "))
		d.Close()
	}
}

// expectLine returns the fields of the next line that match.
func (c *child) expectLine(match func([]string) bool, timeout time.Duration) []string {
	c.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l := <-c.lines:
			if f := strings.Fields(l); len(f) > 1 && match(f) {
				return f
			}
		case <-c.done:
			c.t.Fatalf("child exited (%v)", c.err)
		case <-deadline:
			c.t.Fatalf("child did not answer within %v", timeout)
		}
	}
}

// TestOtherHost: a blob from another host (or namespace, or user) is
// refused at once.
func TestOtherHost(t *testing.T) {
	d := newTestDevice(t, testOptions(t))
	defer d.Close()
	q := transporttest.NewCQ(t, d)
	a := transporttest.NewEndpoint(t, d, q)
	b := transporttest.NewEndpoint(t, d, q)
	blob := b.LocalAddress()
	blob[8] ^= 1
	err := a.Connect(context.Background(), blob)
	if !errors.Is(err, transport.ErrInvalid) || !strings.Contains(err.Error(), "another host") {
		t.Fatalf("connect to a blob of another host: %v; want ErrInvalid saying so", err)
	}
}

// awaitSegment asks the peer of e for the segment holding its region rr
// and waits until it is mapped here.
func awaitSegment(t *testing.T, e *endpoint, rr transport.RemoteRegion) {
	t.Helper()
	slot := int(rr.Key & (maxSlots - 1))
	info := tableSlot(e.peerTab, slot).read()
	if info.key != rr.Key || info.seg == 0 {
		t.Fatalf("the peer's region %#x is not live in a segment (slot holds %+v)", rr.Key, info)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		e.txMu.Lock()
		e.askSegment(info.seg)
		e.segMu.Lock()
		m := e.segs[info.seg]
		e.segMu.Unlock()
		e.txMu.Unlock()
		if m != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("segment %d of the peer not mapped after 10 s", info.seg)
		}
		time.Sleep(time.Millisecond)
	}
}
