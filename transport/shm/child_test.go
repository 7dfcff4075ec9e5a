package shm

// Tests and benchmarks between processes re-execute the test binary as a
// child peer (TestMain), driven by line commands on its stdin:
//
//	NEW name [shared]              create an endpoint (on the child's one shared
//	                               completion queue); answers ADDR name blob key len
//	CONNECT name blob key len [ms] connect it (within ms, default 20 s);
//	                               answers CONNECTED name or ERR name msg
//	ECHO name                      serve it: answer each write-with-immediate with one of
//	                               the same length and immediate into the peer's region,
//	                               each message with the same message
//	FORWARD in out                 for each write with immediate arriving on
//	                               endpoint in, write one of 8 bytes with the same
//	                               immediate on endpoint out (both shared)
//	HOLD name                      post receives on it and report when they fail:
//	                               FAILED name unixnano err
//	EXIT                           close everything; answers BYE
//
// The child's options come from its environment: GOCCL_SHM_CHILD_CMA=0
// turns cross-memory attach off, GOCCL_SHM_CHILD_MEM=heap registers a
// plain slice instead of Alloc'd memory, GOCCL_SHM_CHILD_SIZE sets the
// region's size.

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
)

const childEnv = "GOCCL_SHM_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain(os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

// peerLine is an endpoint's address and region, as exchanged.
type peerLine struct {
	blob []byte
	rr   transport.RemoteRegion
}

func (p peerLine) String() string {
	return fmt.Sprintf("%s %d %d", hex.EncodeToString(p.blob), p.rr.Key, p.rr.Len)
}

func parsePeer(f []string) (peerLine, error) {
	if len(f) != 3 {
		return peerLine{}, fmt.Errorf("want blob key len, got %q", f)
	}
	blob, err := hex.DecodeString(f[0])
	if err != nil {
		return peerLine{}, err
	}
	key, err1 := strconv.ParseUint(f[1], 10, 64)
	n, err2 := strconv.ParseUint(f[2], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return peerLine{}, err
	}
	return peerLine{blob: blob, rr: transport.RemoteRegion{Key: key, Len: n}}, nil
}

func childMain(in io.Reader, out io.Writer) int {
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		fmt.Fprintf(out, format+"\n", args...)
		outMu.Unlock()
	}
	o := Options{DisableCMA: os.Getenv("GOCCL_SHM_CHILD_CMA") == "0"}
	d, err := NewDevice(o)
	if err != nil {
		say("ERR - %v", err)
		return 1
	}
	defer d.Close()
	size := 1 << 20
	if s := os.Getenv("GOCCL_SHM_CHILD_SIZE"); s != "" {
		size, _ = strconv.Atoi(s)
	}
	var mem []byte
	if os.Getenv("GOCCL_SHM_CHILD_MEM") == "heap" {
		mem = make([]byte, size)
	} else if mem, err = Alloc(size); err != nil {
		say("ERR - %v", err)
		return 1
	}
	reg, err := d.Register(mem, transport.AccessAll)
	if err != nil {
		say("ERR - %v", err)
		return 1
	}
	type ep struct {
		ep   transport.Endpoint
		cq   transport.CompletionQueue
		peer transport.RemoteRegion
	}
	eps := map[string]*ep{}
	shared, err := d.NewCompletionQueue(4096)
	if err != nil {
		say("ERR - %v", err)
		return 1
	}
	var wg sync.WaitGroup
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		name := "-"
		if len(f) > 1 {
			name = f[1]
		}
		e := eps[name]
		switch {
		case f[0] == "NEW":
			q := shared
			if len(f) < 3 || f[2] != "shared" {
				if q, err = d.NewCompletionQueue(1024); err != nil {
					say("ERR %s %v", name, err)
					continue
				}
			}
			x, err := d.NewEndpoint(q)
			if err != nil {
				say("ERR %s %v", name, err)
				continue
			}
			eps[name] = &ep{ep: x, cq: q}
			say("ADDR %s %s", name, peerLine{blob: x.LocalAddress(), rr: reg.Remote()})
		case f[0] == "CONNECT" && e != nil:
			timeout := 20 * time.Second
			if len(f) == 6 {
				ms, _ := strconv.Atoi(f[5])
				timeout, f = time.Duration(ms)*time.Millisecond, f[:5]
			}
			p, err := parsePeer(f[2:])
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				err = e.ep.Connect(ctx, p.blob)
				cancel()
			}
			if err != nil {
				say("ERR %s %v", name, err)
				continue
			}
			e.peer = p.rr
			say("CONNECTED %s", name)
		case f[0] == "ECHO" && e != nil:
			wg.Go(func() { echo(e.ep, e.cq, reg, e.peer) })
		case f[0] == "FORWARD" && e != nil && len(f) == 3 && eps[f[2]] != nil:
			out := eps[f[2]]
			wg.Go(func() { forward(e.ep, out.ep, shared, reg, out.peer) })
		case f[0] == "HOLD" && e != nil:
			for i := range 4 {
				if err := e.ep.PostRecv(uint64(i), reg, i*64, 64); err != nil {
					say("ERR %s %v", name, err)
				}
			}
			wg.Go(func() {
				cs := make([]transport.Completion, 4)
				n, err := e.cq.Wait(context.Background(), cs)
				if err != nil {
					return
				}
				say("FAILED %s %d %v", name, time.Now().UnixNano(), cs[:n][0].Err)
			})
		case f[0] == "EXIT":
			for _, e := range eps {
				e.ep.Close()
			}
			wg.Wait()
			say("BYE")
			return 0
		default:
			say("ERR %s unknown command %q", name, sc.Text())
		}
	}
	return 0
}

// echo answers writes with immediate and messages until the endpoint fails.
func echo(ep transport.Endpoint, q transport.CompletionQueue, reg transport.Region, peer transport.RemoteRegion) {
	const tokens = 64
	for i := range tokens {
		if ep.PostRecv(uint64(i), reg, 0, len(reg.Bytes())) != nil {
			return
		}
	}
	cs := make([]transport.Completion, 64)
	ctx := context.Background()
	for {
		n, err := q.Wait(ctx, cs)
		if err != nil {
			return
		}
		for _, c := range cs[:n] {
			if c.Err != nil {
				return
			}
			if c.Op != transport.OpRecv {
				continue
			}
			if ep.PostRecv(c.ID, reg, 0, len(reg.Bytes())) != nil {
				return
			}
			if c.HasImm {
				imm := c.Imm
				err = ep.PostWrite(1<<32, reg, 0, c.Bytes, peer, 0, &imm)
			} else {
				err = ep.PostSend(1<<33, reg, 0, c.Bytes)
			}
			if err != nil {
				return
			}
		}
	}
}

// forward passes each immediate arriving on in on to out's peer.
func forward(in, out transport.Endpoint, q transport.CompletionQueue, reg transport.Region, peer transport.RemoteRegion) {
	const tokens = 64
	for i := range tokens {
		if in.PostRecv(uint64(i), reg, 0, 0) != nil {
			return
		}
	}
	cs := make([]transport.Completion, 64)
	ctx := context.Background()
	for {
		n, err := q.Wait(ctx, cs)
		if err != nil {
			return
		}
		for _, c := range cs[:n] {
			if c.Err != nil {
				return
			}
			if c.Op != transport.OpRecv || c.Endpoint != in {
				continue
			}
			if in.PostRecv(c.ID, reg, 0, 0) != nil {
				return
			}
			imm := c.Imm
			if out.PostWrite(1<<32, reg, 0, 8, peer, 0, &imm) != nil {
				return
			}
		}
	}
}

// child is a running child process.
type child struct {
	t     testing.TB
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	done  chan struct{}
	err   error
}

// startChild starts the test binary as a child with extra environment
// variables; it is killed at the end of the test if still running.
func startChild(t testing.TB, env ...string) *child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return startChildExe(t, exe, nil, env...)
}

func startChildExe(t testing.TB, exe string, setup func(*exec.Cmd), env ...string) *child {
	t.Helper()
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"=1"), env...)
	cmd.Stderr = os.Stderr
	if setup != nil {
		setup(cmd)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{t: t, cmd: cmd, in: in, lines: make(chan string, 64), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		c.err = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		in.Close()
		<-c.done
	})
	return c
}

func (c *child) send(format string, args ...any) {
	c.t.Helper()
	if _, err := fmt.Fprintf(c.in, format+"\n", args...); err != nil {
		c.t.Fatalf("child: %v", err)
	}
}

// expect returns the fields of the next line starting with word (other
// lines are skipped), or fails the test after timeout.
func (c *child) expect(word string, timeout time.Duration) []string {
	c.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l := <-c.lines:
			f := strings.Fields(l)
			if len(f) > 0 && f[0] == "ERR" {
				c.t.Fatalf("child: %s", l)
			}
			if len(f) > 0 && f[0] == word {
				return f
			}
		case <-c.done:
			c.t.Fatalf("child exited (%v) while waiting for %s", c.err, word)
		case <-deadline:
			c.t.Fatalf("child did not say %s within %v", word, timeout)
		}
	}
}

// newEndpoint asks the child for an endpoint and returns its line.
func (c *child) newEndpoint(name string) peerLine {
	c.t.Helper()
	f := c.expectAfter(func() { c.send("NEW %s", name) }, "ADDR")
	p, err := parsePeer(f[2:])
	if err != nil {
		c.t.Fatalf("child's address: %v", err)
	}
	return p
}

// newEndpointShared is newEndpoint on the child's shared queue.
func (c *child) newEndpointShared(name string) peerLine {
	c.t.Helper()
	f := c.expectAfter(func() { c.send("NEW %s shared", name) }, "ADDR")
	p, err := parsePeer(f[2:])
	if err != nil {
		c.t.Fatalf("child's address: %v", err)
	}
	return p
}

func (c *child) expectAfter(do func(), word string) []string {
	c.t.Helper()
	do()
	return c.expect(word, 20*time.Second)
}

// connectChild connects ep (with region rr) to the child's endpoint name
// (whose line is p), both sides at once.
func connectChild(t testing.TB, c *child, name string, p peerLine, ep transport.Endpoint, rr transport.RemoteRegion) {
	t.Helper()
	c.send("CONNECT %s %s", name, peerLine{blob: ep.LocalAddress(), rr: rr})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := ep.Connect(ctx, p.blob); err != nil {
		t.Fatalf("connect to the child: %v", err)
	}
	c.expect("CONNECTED", 20*time.Second)
}

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
