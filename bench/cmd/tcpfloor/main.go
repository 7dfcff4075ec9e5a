// Command tcpfloor measures what two bare Go processes take for the
// small-message loops of OSU's latency and broadcast tests over loopback
// TCP: non-blocking sockets taken out of Go's netpoller, a spinning
// read(2) loop, one write(2) per message, and nothing else. It is the
// floor under goccl's TCP transport on a host: the gap between a row of
// `osu` over TCP and the same row here is goccl's own work on the call's
// path, and Open MPI's row (bench/cmd/peers) is measured against the same
// kernel.
//
//	tcpfloor bcast -m 8:256 -i 20000
//	tcpfloor latency -m 8:4096
//	tcpfloor bcast -m 8 -work 1us    (a stand-in for a library's work per call)
//
// bcast is osu_bcast's loop for 2 ranks: each iteration the root writes
// the payload (its timed part) and both ranks then exchange a barrier
// token (untimed); the receiver's timed part is its wait for the payload,
// from the end of its barrier. latency is half the round trip of a
// ping-pong. Per size it prints each rank's mean time, OSU's figure for
// bcast (the mean of the ranks' means), and the TCP segments without data
// the receiver sent per iteration: acknowledgements the kernel sent on
// their own (TCP_INFO), each a trip through the loopback stack on the
// reading rank's core. -work D spins for D at the start of each call (the
// broadcast, the barrier, each ping), so that the floor can be compared
// with a library that spends D per call.
//
// -b2b times bcast back to back, as nccl-tests and bench/osu's
// --back-to-back do: the untimed calls, a barrier, then the timed calls
// with no barrier between them (the root writes each payload as soon as
// the last one is written; the receiver reads them); a rank's time is its
// span over the timed calls divided by them. -osu-rows prints only the
// rows "bytes avg_us" (bcast: the mean over both ranks; latency: half the
// round trip), the format bench/cmd/peers reads: its floor-tcp column.
//
// The second process is this program again (TCPFLOOR_ROLE=recv in its
// environment). Wrong usage exits 2; a failed run exits 1.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// roleEnv names the environment variable that makes a run the receiver,
// and addrEnv the root's listening address it dials.
const (
	roleEnv = "TCPFLOOR_ROLE"
	addrEnv = "TCPFLOOR_ADDR"
)

// config is a run's parameters, the same in both processes.
type config struct {
	op          string // "bcast" or "latency"
	min, max    int
	iters, warm int
	work        time.Duration
	b2b         bool // bcast back to back (see the package doc)
	osuRows     bool // print only "bytes avg_us" rows
}

func usage(prog string) string {
	return fmt.Sprintf("usage: %s bcast|latency [-m [MIN:]MAX] [-i ITERS] [-x WARMUP] [-work DURATION] [-b2b] [-osu-rows]\n", prog)
}

// run is the program: args[0] is the name it was invoked under.
func run(args []string, stdout, stderr io.Writer) int {
	prog := "tcpfloor"
	if len(args) < 2 || (args[1] != "bcast" && args[1] != "latency") {
		fmt.Fprint(stderr, usage(prog))
		return 2
	}
	cfg := config{op: args[1]}
	fs := flag.NewFlagSet(prog, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	sizes := fs.String("m", "8:256", "message sizes in bytes: [MIN:]MAX, doubling")
	fs.IntVar(&cfg.iters, "i", 10000, "timed iterations per size")
	fs.IntVar(&cfg.warm, "x", 1000, "untimed iterations per size before them")
	fs.DurationVar(&cfg.work, "work", 0, "spin this long at the start of each call")
	fs.BoolVar(&cfg.b2b, "b2b", false, "bcast: time the calls back to back, no barrier between them")
	fs.BoolVar(&cfg.osuRows, "osu-rows", false, "print only rows of bytes and OSU's figure")
	if err := fs.Parse(args[2:]); err != nil || fs.NArg() != 0 {
		fmt.Fprintf(stderr, "%s: bad arguments (%v)\n%s", prog, argErr(err, fs.Args()), usage(prog))
		return 2
	}
	var err error
	if cfg.b2b && cfg.op != "bcast" {
		err = errors.New("-b2b times bcast only (latency is the same ping-pong either way)")
	} else {
		cfg.min, cfg.max, err = parseSizes(*sizes)
	}
	if err != nil || cfg.iters < 1 || cfg.warm < 0 || cfg.work < 0 {
		fmt.Fprintf(stderr, "%s: bad arguments (%v)\n%s", prog, argErr(err, nil), usage(prog))
		return 2
	}
	if os.Getenv(roleEnv) == "recv" {
		if err := receiver(&cfg, os.Getenv(addrEnv), stdout); err != nil {
			fmt.Fprintf(stderr, "%s: receiver: %v\n", prog, err)
			return 1
		}
		return 0
	}
	if err := root(&cfg, args, stdout); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		return 1
	}
	return 0
}

func argErr(err error, rest []string) error {
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("unexpected %q", rest[0])
	}
	return errors.New("sizes, iterations and work must be positive")
}

// parseSizes reads -m: MAX or MIN:MAX, 1 <= MIN <= MAX <= 1 MiB.
func parseSizes(s string) (int, int, error) {
	lo, hi, two := strings.Cut(s, ":")
	if !two {
		lo, hi = s, s
	}
	a, err1 := strconv.Atoi(lo)
	b, err2 := strconv.Atoi(hi)
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, fmt.Errorf("-m %q: %w", s, err)
	}
	if a < 1 || a > b || b > 1<<20 {
		return 0, 0, fmt.Errorf("-m %q: want 1 <= MIN <= MAX <= 1048576", s)
	}
	return a, b, nil
}

// root listens, starts the receiver (this program again), runs every
// size as the root and prints the table.
func root(cfg *config, args []string, stdout io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe, args[1:]...)
	cmd.Env = append(os.Environ(), roleEnv+"=recv", addrEnv+"="+ln.Addr().String())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer cmd.Process.Kill()
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(30 * time.Second))
	c, err := ln.Accept()
	if err != nil {
		return fmt.Errorf("accept the receiver: %w", err)
	}
	fd, err := rawSocket(c.(*net.TCPConn))
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	lines := bufio.NewScanner(out)
	timing := "OSU's method: each call alone, a barrier after it"
	if cfg.b2b {
		timing = "back to back: the calls timed together, no barrier between them"
	}
	fmt.Fprintf(stdout, "# tcpfloor %s: 2 processes over loopback TCP, %d iterations (%d untimed first), work %v per call; %s\n",
		cfg.op, cfg.iters, cfg.warm, cfg.work, timing)
	if cfg.osuRows {
		fmt.Fprintf(stdout, "# %-10s %12s\n", "bytes", "avg_us")
	} else if cfg.op == "bcast" {
		fmt.Fprintf(stdout, "# %-10s %12s %12s %12s %12s\n", "bytes", "root_us", "recv_us", "avg_us", "acks/iter")
	} else {
		fmt.Fprintf(stdout, "# %-10s %12s %12s\n", "bytes", "latency_us", "acks/iter")
	}
	s := newSock(fd, cfg.max)
	for size := cfg.min; size <= cfg.max; size *= 2 {
		us, err := s.rootSize(cfg, size)
		if err != nil {
			return fmt.Errorf("%d bytes: %w", size, err)
		}
		if !lines.Scan() {
			return fmt.Errorf("%d bytes: no result from the receiver (%v)", size, lines.Err())
		}
		var rsize int
		var rus, acks float64
		if _, err := fmt.Sscan(lines.Text(), &rsize, &rus, &acks); err != nil || rsize != size {
			return fmt.Errorf("%d bytes: receiver's result %q", size, lines.Text())
		}
		switch {
		case cfg.osuRows && cfg.op == "bcast":
			fmt.Fprintf(stdout, "%-12d %12.2f\n", size, (us+rus)/2)
		case cfg.osuRows:
			fmt.Fprintf(stdout, "%-12d %12.2f\n", size, us)
		case cfg.op == "bcast":
			fmt.Fprintf(stdout, "%-12d %12.2f %12.2f %12.2f %12.2f\n", size, us, rus, (us+rus)/2, acks)
		default:
			fmt.Fprintf(stdout, "%-12d %12.2f %12.2f\n", size, us, acks)
		}
	}
	return cmd.Wait()
}

// receiver dials the root and runs every size as the receiver, printing
// "size mean_us acks_per_iteration" for each.
func receiver(cfg *config, addr string, stdout io.Writer) error {
	var c net.Conn
	var err error
	for range 100 {
		if c, err = net.Dial("tcp", addr); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	fd, err := rawSocket(c.(*net.TCPConn))
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	s := newSock(fd, cfg.max)
	for size := cfg.min; size <= cfg.max; size *= 2 {
		us, acks, err := s.recvSize(cfg, size)
		if err != nil {
			return fmt.Errorf("%d bytes: %w", size, err)
		}
		fmt.Fprintf(stdout, "%d %.4f %.4f\n", size, us, acks)
	}
	return nil
}

// rawSocket takes c's socket out of Go's netpoller, as goccl's TCP
// transport does (transport/tcp's takeSocket; the floor uses none of
// goccl's code): a non-blocking duplicate with TCP_NODELAY.
func rawSocket(c *net.TCPConn) (int, error) {
	defer c.Close()
	if err := c.SetNoDelay(true); err != nil {
		return -1, err
	}
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var derr error
	if err := raw.Control(func(f uintptr) { fd, derr = unix.Dup(int(f)) }); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, derr
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// sock is one side's connection: a receive buffer that may hold bytes of
// the next message (have), and the payload it sends.
type sock struct {
	fd      int
	buf     []byte
	have    int
	payload []byte
	token   [8]byte
}

func newSock(fd, largest int) *sock {
	return &sock{fd: fd, buf: make([]byte, max(64<<10, 2*largest)), payload: make([]byte, largest)}
}

// send writes b whole, spinning on a full socket. Reads and writes are
// raw system calls, as goccl's: through syscall.Syscall a spinning loop
// keeps the runtime's monitor thread waking to take its processor back,
// which takes the core from the loop now and then.
func (s *sock) send(b []byte) error {
	for len(b) > 0 {
		r, _, en := unix.RawSyscall(unix.SYS_WRITE, uintptr(s.fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		if en == unix.EAGAIN || en == unix.EINTR {
			continue
		}
		if en != 0 {
			return en
		}
		b = b[r:]
	}
	return nil
}

// recv waits, spinning on read(2), until n bytes of the stream arrived
// and consumes them.
func (s *sock) recv(n int) error {
	for s.have < n {
		k, _, en := unix.RawSyscall(unix.SYS_READ, uintptr(s.fd), uintptr(unsafe.Pointer(&s.buf[0])), uintptr(len(s.buf)))
		if en == unix.EAGAIN || en == unix.EINTR {
			continue
		}
		if en != 0 {
			return en
		}
		if k == 0 {
			return io.ErrUnexpectedEOF
		}
		s.have += int(k)
	}
	s.have -= n
	return nil
}

// barrier is the 2-rank token exchange that follows each broadcast.
func (s *sock) barrier(work time.Duration) error {
	spin(work)
	if err := s.send(s.token[:]); err != nil {
		return err
	}
	return s.recv(len(s.token))
}

// rootSize runs one size as the root; it returns the mean time of the
// timed part in microseconds.
func (s *sock) rootSize(cfg *config, size int) (float64, error) {
	var sum time.Duration
	if err := s.barrier(0); err != nil {
		return 0, err
	}
	if cfg.b2b {
		for range cfg.warm {
			if err := s.send(s.payload[:size]); err != nil {
				return 0, err
			}
		}
		if err := s.barrier(0); err != nil {
			return 0, err
		}
		t := time.Now()
		for range cfg.iters {
			spin(cfg.work)
			if err := s.send(s.payload[:size]); err != nil {
				return 0, err
			}
		}
		return float64(time.Since(t).Nanoseconds()) / float64(cfg.iters) / 1e3, nil
	}
	for i := range cfg.warm + cfg.iters {
		switch cfg.op {
		case "bcast":
			t := time.Now()
			spin(cfg.work)
			err := s.send(s.payload[:size])
			d := time.Since(t)
			if err == nil {
				err = s.barrier(cfg.work)
			}
			if err != nil {
				return 0, err
			}
			if i >= cfg.warm {
				sum += d
			}
		case "latency":
			if i == cfg.warm {
				sum = 0
			}
			t := time.Now()
			spin(cfg.work)
			err := s.send(s.payload[:size])
			if err == nil {
				err = s.recv(size)
			}
			if err != nil {
				return 0, err
			}
			sum += time.Since(t)
		}
	}
	us := float64(sum.Nanoseconds()) / float64(cfg.iters) / 1e3
	if cfg.op == "latency" {
		us /= 2
	}
	return us, nil
}

// recvSize runs one size as the receiver: the mean time of its timed
// part (bcast) in microseconds, and the segments without data it sent
// per timed iteration.
func (s *sock) recvSize(cfg *config, size int) (float64, float64, error) {
	var sum time.Duration
	if err := s.barrier(0); err != nil {
		return 0, 0, err
	}
	var segs, data uint32
	if cfg.b2b {
		for range cfg.warm {
			if err := s.recv(size); err != nil {
				return 0, 0, err
			}
		}
		if err := s.barrier(0); err != nil {
			return 0, 0, err
		}
		info, err := unix.GetsockoptTCPInfo(s.fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			return 0, 0, err
		}
		t := time.Now()
		for range cfg.iters {
			spin(cfg.work)
			if err := s.recv(size); err != nil {
				return 0, 0, err
			}
		}
		d := time.Since(t)
		after, err := unix.GetsockoptTCPInfo(s.fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			return 0, 0, err
		}
		acks := float64((after.Segs_out-info.Segs_out)-(after.Data_segs_out-info.Data_segs_out)) / float64(cfg.iters)
		return float64(d.Nanoseconds()) / float64(cfg.iters) / 1e3, acks, nil
	}
	for i := range cfg.warm + cfg.iters {
		if i == cfg.warm {
			info, err := unix.GetsockoptTCPInfo(s.fd, unix.IPPROTO_TCP, unix.TCP_INFO)
			if err != nil {
				return 0, 0, err
			}
			segs, data = info.Segs_out, info.Data_segs_out
		}
		switch cfg.op {
		case "bcast":
			t := time.Now()
			spin(cfg.work)
			err := s.recv(size)
			d := time.Since(t)
			if err == nil {
				err = s.barrier(cfg.work)
			}
			if err != nil {
				return 0, 0, err
			}
			if i >= cfg.warm {
				sum += d
			}
		case "latency":
			err := s.recv(size)
			if err == nil {
				spin(cfg.work)
				err = s.send(s.payload[:size])
			}
			if err != nil {
				return 0, 0, err
			}
		}
	}
	info, err := unix.GetsockoptTCPInfo(s.fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil {
		return 0, 0, err
	}
	acks := float64((info.Segs_out-segs)-(info.Data_segs_out-data)) / float64(cfg.iters)
	return float64(sum.Nanoseconds()) / float64(cfg.iters) / 1e3, acks, nil
}

// spin busy-waits for d, as a library's work on a call's path would take
// the core.
func spin(d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.Now()
	for time.Since(t) < d {
	}
}
