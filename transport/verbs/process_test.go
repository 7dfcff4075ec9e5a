package verbs

// Two processes over the adapter: the test re-executes its own binary as the
// peer, and the two exchange address blobs over the child's stdin and
// stdout, as ranks do over bootstrap.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
)

const childEnv = "GOCCL_VERBS_TEST_CHILD"

// exchange writes "ADDR <blob> <key> <addr> <len>" to w and reads the
// peer's line from r.
func exchange(w io.Writer, r *bufio.Reader, blob []byte, rr transport.RemoteRegion) ([]byte, transport.RemoteRegion, error) {
	if _, err := fmt.Fprintf(w, "ADDR %s %d %d %d\n", hex.EncodeToString(blob), rr.Key, rr.Addr, rr.Len); err != nil {
		return nil, rr, err
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, rr, fmt.Errorf("reading the peer's address: %w", err)
		}
		f := strings.Fields(line)
		if len(f) != 5 || f[0] != "ADDR" {
			continue // test output of the child
		}
		peer, err := hex.DecodeString(f[1])
		if err != nil {
			return nil, rr, err
		}
		var v [3]uint64
		for i := range v {
			if v[i], err = strconv.ParseUint(f[2+i], 10, 64); err != nil {
				return nil, rr, err
			}
		}
		return peer, transport.RemoteRegion{Key: v[0], Addr: v[1], Len: v[2]}, nil
	}
}

const procN = 1 << 20

// TestTwoProcesses: the parent writes 1 MiB with an immediate into the
// child's region, the child checks it and answers with a send, the parent
// reads part of the child's region back, closes, and the child sees its
// pending receive fail with ErrPeerClosed.
func TestTwoProcesses(t *testing.T) {
	d := openDevice(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var childOut bytes.Buffer
	r := bufio.NewReader(io.TeeReader(stdout, &childOut))

	q, err := d.NewCompletionQueue(64)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := d.NewEndpoint(q)
	if err != nil {
		t.Fatal(err)
	}
	buf := alloc(t, procN)
	for i := range buf {
		buf[i] = byte(i*31 + 5)
	}
	reg := register(t, d, buf, transport.AccessLocalWrite)
	peerBlob, peerRegion, err := exchange(stdin, r, ep.LocalAddress(), reg.Remote())
	if err != nil {
		cmd.Wait()
		t.Fatalf("%v; child:\n%s%s", err, childOut.String(), stderr.String())
	}
	drained := make(chan struct{})
	go func() { // the child's output, up to its exit
		io.Copy(io.Discard, r)
		close(drained)
	}()
	if err := ep.Connect(ctx, peerBlob); err != nil {
		t.Fatal(err)
	}
	back := alloc(t, 4096)
	rb := register(t, d, back, transport.AccessLocalWrite)
	if err := ep.PostRecv(1, rb, 0, 64); err != nil {
		t.Fatal(err)
	}
	imm := uint32(42)
	if err := ep.PostWrite(2, reg, 0, procN, peerRegion, 0, &imm); err != nil {
		t.Fatal(err)
	}
	got := waitN(t, q, 2)
	var reply transport.Completion
	for _, c := range got {
		if c.Err != nil {
			t.Fatalf("completion %+v", c)
		}
		if c.Op == transport.OpRecv {
			reply = c
		}
	}
	if reply.Bytes != 2 || string(back[:2]) != "OK" {
		t.Fatalf("child answered %q (%+v)", back[:reply.Bytes], reply)
	}
	clear(back)
	if err := ep.PostRead(3, rb, 0, 4096, peerRegion, procN-4096); err != nil {
		t.Fatal(err)
	}
	if c := waitN(t, q, 1)[0]; c.Err != nil || !bytes.Equal(back, buf[procN-4096:]) {
		t.Fatalf("read from the child: %+v", c)
	}
	if err := ep.Close(); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	<-drained
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v\n%s%s", err, childOut.String(), stderr.String())
	}
	if !strings.Contains(childOut.String(), "CHILD PASS") {
		t.Fatalf("child did not pass:\n%s", childOut.String())
	}
	t.Logf("child process passed (pid %d)", cmd.Process.Pid)
}

// TestMain runs childMain instead of the tests in the child process of
// TestTwoProcesses.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		if err := childMain(); err != nil {
			fmt.Println("CHILD FAIL:", err)
			os.Exit(1)
		}
		fmt.Println("CHILD PASS")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// childMain is the peer of TestTwoProcesses.
func childMain() error {
	cfg, err := envConfig()
	if err != nil {
		return err
	}
	d, err := OpenConfig(cfg)
	if err != nil {
		return err
	}
	defer d.Close()
	q, err := d.NewCompletionQueue(64)
	if err != nil {
		return err
	}
	ep, err := d.NewEndpoint(q)
	if err != nil {
		return err
	}
	buf, err := transport.Alloc(procN)
	if err != nil {
		return err
	}
	defer transport.Free(buf)
	reg, err := d.Register(buf, transport.AccessAll)
	if err != nil {
		return err
	}
	peerBlob, _, err := exchange(os.Stdout, bufio.NewReader(os.Stdin), ep.LocalAddress(), reg.Remote())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ep.Connect(ctx, peerBlob); err != nil {
		return err
	}
	out := make([]transport.Completion, 1)
	wait := func() (transport.Completion, error) {
		_, err := q.Wait(ctx, out)
		return out[0], err
	}
	if err := ep.PostRecv(1, reg, 0, 0); err != nil {
		return err
	}
	c, err := wait()
	if err != nil || c.Err != nil || !c.HasImm || c.Imm != 42 || c.Bytes != procN {
		return fmt.Errorf("write with immediate: %+v, %v", c, err)
	}
	for i := range buf {
		if buf[i] != byte(i*31+5) {
			return fmt.Errorf("byte %d is %d, want %d", i, buf[i], byte(i*31+5))
		}
	}
	msg, err := transport.Alloc(64)
	if err != nil {
		return err
	}
	defer transport.Free(msg)
	copy(msg, "OK")
	rm, err := d.Register(msg, 0)
	if err != nil {
		return err
	}
	// The parent reads after the answer, then closes: this receive, posted
	// before the answer, must fail with that.
	if err := ep.PostRecv(3, reg, 0, 8); err != nil {
		return err
	}
	if err := ep.PostSend(2, rm, 0, 2); err != nil {
		return err
	}
	// The send's completion and the receive's flush come in either order:
	// a queue's send and receive sides complete independently (seen on
	// Soft-RoCE: the flush first, the parent having read and closed
	// before the send's acknowledgement was processed here).
	var sent, flushed bool
	for range 2 {
		c, err := wait()
		switch {
		case err != nil:
			return fmt.Errorf("waiting for the send and the pending receive: %v", err)
		case c.Op == transport.OpSend && c.ID == 2 && !sent:
			if c.Err != nil {
				return fmt.Errorf("send: %+v", c)
			}
			sent = true
		case c.ID == 3 && !flushed:
			if !errors.Is(c.Err, transport.ErrPeerClosed) {
				return fmt.Errorf("pending receive after the parent closed: %+v", c)
			}
			flushed = true
		default:
			return fmt.Errorf("unexpected completion: %+v", c)
		}
	}
	return nil
}
