package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goccl/goccl/bootstrap"
)

// config is a validated command line.
type config struct {
	n             int
	hosts         []host // nil: every rank on this host
	srun          bool   // start the ranks with srun
	oversubscribe bool
	grace         time.Duration
	timeout       time.Duration // 0: none
	prog          string
	args          []string
	exports       []kv // -x
	sshCmd        []string
	srunCmd       []string
	bootstrapAddr string
	timestamp     bool
	verbose       bool
	outputDir     string
	overcommit    bool // srun --overcommit
}

// job is a launch in progress.
type job struct {
	cfg   config
	out   *output
	procs []*proc
	pumps sync.WaitGroup
	exits chan exit

	srunMu   sync.Mutex
	srunFail *srunFailure // the first task failure srun reported
}

func launch(ctx context.Context, cfg config, stdout, stderr io.Writer) int {
	j := &job{cfg: cfg, out: newOutput(stdout, stderr, cfg.timestamp)}
	if cfg.outputDir != "" {
		if err := j.out.openFiles(cfg.outputDir, cfg.n); err != nil {
			j.out.logf("%v", err)
			return 1
		}
		defer j.out.closeFiles()
	}
	self, _ := os.Hostname()
	if self == "" {
		self = "localhost"
	}
	hosts, resolve := cfg.hosts, resolver(lookupIP)
	switch {
	case cfg.srun:
		var err error
		if hosts, err = slurmNodes(os.LookupEnv); err != nil {
			j.out.logf("%v", err)
			return 1
		}
		markLocal(hosts)
		resolve = slurmResolve
	case hosts == nil:
		hosts = []host{{name: self, slots: cfg.n, local: true}}
	default:
		markLocal(hosts)
	}
	var places []placement
	if !cfg.srun {
		var err error
		if places, err = place(hosts, cfg.n, cfg.oversubscribe); err != nil {
			j.out.logf("%v", err)
			return 2
		}
	}
	plan, err := planStore(cfg.bootstrapAddr, hosts, resolve)
	if err != nil {
		j.out.logf("%v", err)
		return 1
	}
	secret := bootstrap.NewSecret()
	secretHex := hex.EncodeToString(secret)
	srv, err := bootstrap.NewServer(plan.listen, secret,
		bootstrap.WithLogger(slog.New(slog.NewTextHandler(logWriter{j.out}, nil))))
	if err != nil {
		j.out.logf("bootstrap store on %s: %v", plan.listen, err)
		return 1
	}
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Addr())
	storeFor := func(h int) string { return net.JoinHostPort(plan.dial[h], port) }
	if cfg.verbose {
		j.out.logf("bootstrap store listening on %s", srv.Addr())
	}
	masterPort, err := freePort()
	if err != nil {
		j.out.logf("pick MASTER_PORT: %v", err)
		return 1
	}
	dir, err := os.Getwd()
	if err != nil {
		j.out.logf("working directory: %v", err)
		return 1
	}
	prog := cfg.prog
	if p, err := exec.LookPath(prog); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			prog = abs
		}
	}
	argv := append([]string{prog}, cfg.args...)

	sig := notifySignals()
	defer sig.stop()
	j.exits = make(chan exit, cfg.n)
	startErr := func(err error) int {
		j.out.logf("%v", err)
		for _, p := range j.procs {
			p.signal(syscall.SIGKILL)
		}
		for range j.procs {
			<-j.exits
		}
		j.finish()
		return 1
	}
	base := os.Environ()
	if cfg.srun {
		exe, err := os.Executable()
		if err != nil {
			return startErr(fmt.Errorf("start srun: %w", err))
		}
		all := make([]int, cfg.n)
		for i := range all {
			all[i] = i
		}
		p := &proc{kind: kindSrun, ranks: all}
		p.cmd = exec.Command(cfg.srunCmd[0], srunArgv(cfg.srunCmd[1:], cfg.n, cfg.overcommit, dir, exe, argv)...)
		p.cmd.Env = srunEnv(base, cfg.exports, storeFor(0), secretHex, masterPort)
		if cfg.verbose {
			j.out.logf("ranks 0-%d: %s (store %s)", cfg.n-1, strings.Join(p.cmd.Args, " "), storeFor(0))
		}
		if err := p.start(j.out, &j.pumps, nil, j.srunLine); err != nil {
			return startErr(fmt.Errorf("start srun: %w", err))
		}
		j.procs = append(j.procs, p)
		go p.wait(j.exits)
	} else {
		master := hosts[places[0].host].name
		if hosts[places[0].host].local {
			master = plan.dial[places[0].host]
		}
		mux, err := newMuxPlan(cfg.sshCmd[0], hosts, places)
		if err != nil {
			return startErr(err)
		}
		defer mux.close()
		startRank := func(pl placement) error {
			h := hosts[pl.host]
			vars := rankVars(pl, cfg.n, storeFor(pl.host), secretHex, master, masterPort)
			p := &proc{ranks: []int{pl.rank}, host: h.name}
			var stdin []byte
			if h.local {
				p.kind = kindLocal
				p.host = self
				p.cmd = exec.Command(prog, cfg.args...)
				p.cmd.Env = mergeEnv(base, cfg.exports, vars)
			} else {
				p.kind = kindSSH
				ssh := sshArgv(append(slices.Clip(cfg.sshCmd), mux.options(pl)...), h.name, cfg.grace, dir, argv)
				p.cmd = exec.Command(ssh[0], ssh[1:]...)
				stdin = envBlock(remoteEnv(base, cfg.exports, vars))
			}
			if cfg.verbose {
				how := "here"
				if p.kind == kindSSH {
					how = "over " + strings.Join(p.cmd.Args[:len(p.cmd.Args)-1], " ")
				}
				j.out.logf("rank %d on %s, %s (store %s)", pl.rank, p.host, how, storeFor(pl.host))
			}
			if err := p.start(j.out, &j.pumps, stdin, nil); err != nil {
				return fmt.Errorf("start rank %d: %w", pl.rank, err)
			}
			j.procs = append(j.procs, p)
			go p.wait(j.exits)
			return nil
		}
		// First the local ranks and those that connect on their own, then
		// the shared connections wave by wave, then the ranks over them.
		for _, pl := range places {
			if !mux.opens(pl) && !mux.shares(pl) {
				if err := startRank(pl); err != nil {
					return startErr(err)
				}
			}
		}
		for _, wave := range mux.waves {
			for _, pl := range wave {
				if err := startRank(pl); err != nil {
					return startErr(err)
				}
			}
			mux.waitUp(wave, sshMasterWait, func(rank int) bool {
				for _, p := range j.procs {
					if p.ranks[0] == rank {
						p.mu.Lock()
						defer p.mu.Unlock()
						return p.exited
					}
				}
				return true
			})
		}
		for _, pl := range places {
			if mux.shares(pl) {
				if err := startRank(pl); err != nil {
					return startErr(err)
				}
			}
		}
	}
	slices.SortFunc(j.procs, func(a, b *proc) int { return a.ranks[0] - b.ranks[0] })
	return j.supervise(ctx, sig)
}

// srunLine handles a line srun wrote itself: it is shown on stderr, and
// the first task failure it reports is kept for the summary.
func (j *job) srunLine(line []byte) {
	if f, ok := parseSrunError(line); ok {
		j.srunMu.Lock()
		if j.srunFail == nil {
			j.srunFail = &f
		}
		j.srunMu.Unlock()
	}
	if len(line) > 0 && line[len(line)-1] != '\n' {
		line = append(line, '\n')
	}
	j.out.writeStderr(line)
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
