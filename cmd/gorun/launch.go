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
	"github.com/goccl/goccl/internal/affinity"
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
	overcommit    bool   // srun --overcommit
	bindTo        string // --bind-to: auto, core or none
}

// job is a launch in progress.
type job struct {
	cfg   config
	out   *output
	mux   *muxPlan // shared ssh connections, closed when the job is over
	procs []*proc
	pumps sync.WaitGroup
	exits chan exit

	srunMu   sync.Mutex
	srunFail *srunFailure // the first task failure srun reported

	cpuBlocks map[int][]int // CPUs of each local rank (--bind-to); none: unbound

	// blames reads the ranks' bootstrap.Blames from the store gorun
	// hosts (nil when it hosts none).
	blames func() map[int]bootstrap.Blame
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
	hosts, places, resolve, code := j.placeRanks(self)
	if code >= 0 {
		return code
	}
	st, err := j.startStore(hosts, resolve)
	if err != nil {
		j.out.logf("%v", err)
		return 1
	}
	defer st.srv.Close()
	j.blames = func() map[int]bootstrap.Blame { return st.srv.Blames(cfg.n) }
	defer j.closeMux()
	sig := notifySignals()
	defer sig.stop()
	j.exits = make(chan exit, cfg.n)
	if cfg.srun {
		err = j.startSrun(st)
	} else {
		err = j.startHosts(st, self, hosts, places)
	}
	if err != nil {
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
	slices.SortFunc(j.procs, func(a, b *proc) int { return a.ranks[0] - b.ranks[0] })
	return j.supervise(ctx, sig)
}

// closeMux removes the ssh control sockets once the job is over.
func (j *job) closeMux() {
	if j.mux != nil {
		j.mux.close()
		j.mux = nil
	}
}

// placeRanks decides which host runs which rank: srun's nodes (srun
// places the ranks itself), -H / --hostfile's hosts, or this host alone.
// code >= 0 means launch is over with that status.
func (j *job) placeRanks(self string) (hosts []host, places []placement, resolve resolver, code int) {
	hosts, resolve = j.cfg.hosts, resolver(lookupIP)
	switch {
	case j.cfg.srun:
		var err error
		if hosts, err = slurmNodes(os.LookupEnv); err != nil {
			j.out.logf("%v", err)
			return nil, nil, nil, 1
		}
		markLocal(hosts)
		return hosts, nil, slurmResolve, -1
	case hosts == nil:
		hosts = []host{{name: self, slots: j.cfg.n, local: true}}
	default:
		markLocal(hosts)
	}
	places, err := place(hosts, j.cfg.n, j.cfg.oversubscribe)
	if err != nil {
		j.out.logf("%v", err)
		return nil, nil, nil, 2
	}
	return hosts, places, resolve, -1
}

// store is the running bootstrap store and what the ranks need to reach
// it and each other.
type store struct {
	srv        *bootstrap.Server
	plan       storePlan
	port       string
	secretHex  string
	masterPort int    // MASTER_PORT for torchrun-style programs
	dir        string // the ranks' working directory
	prog       string // the program, resolved to an absolute path
	argv       []string
}

// addrFor is the store's address as seen from host h.
func (s *store) addrFor(h int) string { return net.JoinHostPort(s.plan.dial[h], s.port) }

// startStore starts the bootstrap store with a fresh secret, on an address
// every host reaches, and resolves what the ranks will run.
func (j *job) startStore(hosts []host, resolve resolver) (*store, error) {
	plan, err := planStore(j.cfg.bootstrapAddr, hosts, resolve)
	if err != nil {
		return nil, err
	}
	secret := bootstrap.NewSecret()
	srv, err := bootstrap.NewServer(plan.listen, secret,
		bootstrap.WithLogger(slog.New(slog.NewTextHandler(logWriter{j.out}, nil))))
	if err != nil {
		return nil, fmt.Errorf("bootstrap store on %s: %w", plan.listen, err)
	}
	st := &store{srv: srv, plan: plan, secretHex: hex.EncodeToString(secret)}
	_, st.port, _ = net.SplitHostPort(srv.Addr())
	if j.cfg.verbose {
		j.out.logf("bootstrap store listening on %s", srv.Addr())
	}
	if st.masterPort, err = freePort(); err != nil {
		srv.Close()
		return nil, fmt.Errorf("pick MASTER_PORT: %w", err)
	}
	if st.dir, err = os.Getwd(); err != nil {
		srv.Close()
		return nil, fmt.Errorf("working directory: %w", err)
	}
	st.prog = j.cfg.prog
	if p, err := exec.LookPath(st.prog); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			st.prog = abs
		}
	} else if !strings.Contains(st.prog, "/") {
		if fi, err := os.Stat(st.prog); err == nil && fi.Mode().IsRegular() {
			srv.Close()
			return nil, fmt.Errorf("%q is not in $PATH; for the one in this directory, say ./%s", st.prog, st.prog)
		}
	}
	st.argv = append([]string{st.prog}, j.cfg.args...)
	return st, nil
}

// startSrun starts every rank with one srun inside the allocation.
func (j *job) startSrun(st *store) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("start srun: %w", err)
	}
	all := make([]int, j.cfg.n)
	for i := range all {
		all[i] = i
	}
	p := &proc{kind: kindSrun, ranks: all}
	p.cmd = exec.Command(j.cfg.srunCmd[0], srunArgv(j.cfg.srunCmd[1:], j.cfg.n, j.cfg.overcommit, st.dir, exe, st.argv)...)
	p.cmd.Env = srunEnv(os.Environ(), j.cfg.exports, st.addrFor(0), st.secretHex, st.masterPort)
	if j.cfg.verbose {
		j.out.logf("ranks 0-%d: %s (store %s)", j.cfg.n-1, strings.Join(p.cmd.Args, " "), st.addrFor(0))
	}
	if err := p.start(j.out, &j.pumps, nil, j.srunLine); err != nil {
		return fmt.Errorf("start srun: %w", err)
	}
	j.procs = append(j.procs, p)
	go p.wait(j.exits)
	return nil
}

// bind decides the CPUs of the ranks started on this host (--bind-to).
func (j *job) bind(hosts []host, places []placement) error {
	var local []int
	for _, pl := range places {
		if hosts[pl.host].local {
			local = append(local, pl.rank)
		}
	}
	if len(local) == 0 || j.cfg.bindTo == "none" {
		return nil
	}
	cpus, err := affinity.Usable()
	if err != nil {
		if j.cfg.bindTo == "core" {
			return fmt.Errorf("--bind-to core: %w", err)
		}
		return nil
	}
	blocks, err := affinity.Blocks(j.cfg.bindTo, cpus, len(local))
	if err != nil {
		return err
	}
	if blocks == nil {
		return nil
	}
	j.cpuBlocks = make(map[int][]int, len(local))
	for i, r := range local {
		j.cpuBlocks[r] = blocks[i]
	}
	return nil
}

// startHosts starts each placed rank, here or over ssh: first the local
// ranks and those that connect on their own, then the shared ssh
// connections wave by wave, then the ranks that ride on them.
func (j *job) startHosts(st *store, self string, hosts []host, places []placement) error {
	master := hosts[places[0].host].name
	if hosts[places[0].host].local {
		master = st.plan.dial[places[0].host]
	}
	if err := j.bind(hosts, places); err != nil {
		return err
	}
	mux, err := newMuxPlan(j.cfg.sshCmd[0], hosts, places)
	if err != nil {
		return err
	}
	// The shared connections stay until the job is over (launch closes
	// the plan): a rank's ssh started last attaches some time after it
	// was started, and one that finds no connection opens its own; many
	// at once are more handshakes than sshd takes (MaxStartups).
	j.mux = mux
	start := func(pl placement) error {
		return j.startRank(st, self, hosts[pl.host], pl, master, mux)
	}
	for _, pl := range places {
		if !mux.shares(pl) {
			if err := start(pl); err != nil {
				return err
			}
		}
	}
	for _, wave := range mux.waves {
		argv := func(c muxConn) []string { return connArgv(j.cfg.sshCmd, hosts[c.host].name, c) }
		if err := mux.open(wave, argv, logWriter{j.out}, sshMasterWait); err != nil {
			return err
		}
	}
	for _, pl := range places {
		if mux.shares(pl) {
			if err := start(pl); err != nil {
				return err
			}
		}
	}
	return nil
}

// startRank starts the rank placed by pl on host h.
func (j *job) startRank(st *store, self string, h host, pl placement, master string, mux *muxPlan) error {
	vars := rankVars(pl, j.cfg.n, st.addrFor(pl.host), st.secretHex, master, st.masterPort)
	p := &proc{ranks: []int{pl.rank}, host: h.name}
	var stdin []byte
	if h.local {
		p.kind = kindLocal
		p.host = self
		p.cmd = exec.Command(st.prog, j.cfg.args...)
		p.cpus = j.cpuBlocks[pl.rank]
		// gorun binds its own host's ranks (or not: --bind-to none)
		// before they run: a rank must not split its CPUs again, were
		// GOCCL_BIND in gorun's environment.
		vars = append(vars, kv{"GOCCL_BIND", "none"})
		p.cmd.Env = mergeEnv(os.Environ(), j.cfg.exports, vars)
	} else {
		p.kind = kindSSH
		ssh := sshArgv(append(slices.Clip(j.cfg.sshCmd), mux.options(pl)...), h.name, j.cfg.grace, st.dir, st.argv)
		p.cmd = exec.Command(ssh[0], ssh[1:]...)
		if j.cfg.bindTo != "none" && !hasVar(os.Environ(), "GOCCL_BIND") && !exported(j.cfg.exports, "GOCCL_BIND") {
			// gorun cannot bind a rank on another host: the rank binds
			// itself to its share of that host's CPUs (comm.Init).
			vars = append(vars, kv{"GOCCL_BIND", j.cfg.bindTo})
		}
		stdin = envBlock(remoteEnv(os.Environ(), j.cfg.exports, vars))
	}
	if j.cfg.verbose {
		how := "here"
		if p.kind == kindSSH {
			how = "over " + strings.Join(p.cmd.Args[:len(p.cmd.Args)-1], " ")
		}
		bound := ""
		if p.cpus != nil {
			bound = ", bound to CPUs " + cpuList(p.cpus)
		}
		j.out.logf("rank %d on %s, %s (store %s)%s", pl.rank, p.host, how, st.addrFor(pl.host), bound)
	}
	if err := p.start(j.out, &j.pumps, stdin, nil); err != nil {
		return fmt.Errorf("start rank %d: %w", pl.rank, err)
	}
	j.procs = append(j.procs, p)
	go p.wait(j.exits)
	return nil
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
