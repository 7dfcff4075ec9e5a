package comm

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccl/goccl/bootstrap"
	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/affinity"
	"github.com/goccl/goccl/transport/tcp"
)

// EnvVar describes one environment variable that goccl reads.
type EnvVar struct {
	Name string // "GOCCL_CHUNK_SIZE"
	// Field is the Options field the variable sets ("ChunkSize"); empty
	// for the launcher's variables, which package bootstrap reads (see
	// bootstrap.FromEnv).
	Field string
	// Default is the value an unset variable stands for, written as the
	// variable would be; empty when there is none (Meaning says what
	// unset does).
	Default string
	Meaning string // one line of Markdown
}

// envVar is an EnvVar with what OptionsFromEnv does with it: set parses a
// value into its field of Options, unset says that the field is zero,
// same that two Options agree on it. All nil for the launcher's variables.
type envVar struct {
	EnvVar
	set   func(o *Options, v string) error
	unset func(o *Options) bool
	same  func(a, b *Options) bool
	// show is the field's value as text.
	show func(o *Options) string
	// defaultBy names who applies Default when not fill (a transport).
	defaultBy string
	// agree: every rank of a job must have the same value (see
	// agreedSettings); the others are each rank's own.
	agree bool
}

// option makes the envVar of an Options field: parse turns the variable's
// value into the field's (its error says what is wanted, without the
// variable's name or value).
func option[T comparable](e EnvVar, field func(*Options) *T, parse func(string) (T, error)) envVar {
	return envVar{
		EnvVar: e,
		set: func(o *Options, v string) error {
			x, err := parse(v)
			if err == nil {
				*field(o) = x
			}
			return err
		},
		unset: func(o *Options) bool { var zero T; return *field(o) == zero },
		same:  func(a, b *Options) bool { return *field(a) == *field(b) },
		show:  func(o *Options) string { return fmt.Sprint(*field(o)) },
	}
}

// mustAgree marks e as a setting every rank must share.
func mustAgree(e envVar) envVar {
	e.agree = true
	return e
}

// showAlgorithms is GOCCL_ALGO's value as the ranks compare it: its
// collectives and their algorithms in the collectives' order, so that
// the same overrides written in another order or spacing agree.
func showAlgorithms(o *Options) string {
	m, err := parseAlgorithms(o.Algorithms)
	if err != nil {
		return o.Algorithms // refused where it is applied
	}
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k.String() + ":" + m[k]
	}
	return strings.Join(parts, ",")
}

// withShow gives e another show (see showAlgorithms).
func withShow(e envVar, show func(o *Options) string) envVar {
	e.show = show
	return e
}

// envVars is the one table of the environment: OptionsFromEnv, the
// defaults' check, Environment and the README's table (EnvironmentTable)
// come from it. Adding a variable is one entry here and its field of
// Options.
var envVars = []envVar{
	mustAgree(option(EnvVar{"GOCCL_TRANSPORT", "Transport", "auto",
		"`auto`: shared memory between the ranks of one host; verbs between hosts if a usable device exists, else TCP. `shm` (one host only), `tcp`, `verbs` (an error without a device)"},
		func(o *Options) *string { return &o.Transport }, parseTransport)),
	option(EnvVar{"GOCCL_BIND", "Bind", "",
		"bind this rank to its share of the host's CPUs at Init, as gorun's `--bind-to` (`auto`, `core`, `none`); gorun sets it for the ranks it starts over ssh; unset: as started"},
		func(o *Options) *string { return &o.Bind }, parseBind),
	mustAgree(withShow(option(EnvVar{"GOCCL_ALGO", "Algorithms", "",
		"per-collective algorithm override, e.g. `allreduce:ring,broadcast:pipeline` (canonical names: see below); unset: the selector's choice"},
		func(o *Options) *string { return &o.Algorithms }, parseAlgoSpec), showAlgorithms)),
	mustAgree(option(EnvVar{"GOCCL_CHUNK_SIZE", "ChunkSize", strconv.Itoa(defaultChunkSize),
		"pipelining chunk and staging slot size in bytes (1024 to 67108864, others refused)"},
		func(o *Options) *int { return &o.ChunkSize }, parseChunkSize)),
	mustAgree(option(EnvVar{"GOCCL_SLOTS", "Slots", strconv.Itoa(defaultSlots),
		"staging slots (chunks in flight) per peer"},
		func(o *Options) *int { return &o.Slots }, parsePositive)),
	mustAgree(option(EnvVar{"GOCCL_STAGING_BUDGET", "StagingBudget", strconv.Itoa(DefaultStagingBudget),
		"staging bytes per rank were every peer connected: beyond it, fewer slots per peer (down to 2), then smaller chunks"},
		func(o *Options) *int { return &o.StagingBudget }, parsePositive)),
	mustAgree(option(EnvVar{"GOCCL_PEER_WINDOW", "PeerWindow", strconv.Itoa(DefaultPeerWindow),
		"peers an all-to-all exchanges with at a time (at least 2): larger jobs go through batches of that many"},
		func(o *Options) *int { return &o.PeerWindow }, parseWindow)),
	mustAgree(option(EnvVar{"GOCCL_MAX_PEERS", "MaxPeers", strconv.Itoa(DefaultMaxPeers),
		"peers a rank keeps connected; in larger jobs an all-to-all's links to a batch of peers are closed once both ranks are done with them"},
		func(o *Options) *int { return &o.MaxPeers }, parsePositive)),
	mustAgree(option(EnvVar{"GOCCL_SHM_BOARD", "NoShmBoard", "1",
		"`0`: collectives and point-to-point calls of ranks all on one host go through the executor's messages instead of the shared-memory board (slots, mailboxes and direct copies between the ranks' buffers)"},
		func(o *Options) *bool { return &o.NoShmBoard }, parseBoard)),
	mustAgree(option(EnvVar{"GOCCL_YIELD_WHEN_IDLE", "YieldWhenIdle", "auto",
		"`1`: a waiting rank yields the processor between looks instead of spinning; `0`: it spins; `auto`: it yields when the ranks of its host outnumber the host's processors (say 1 where the processors are shared with more than the host's ranks: containers or network namespaces of one machine as hosts, busy nodes; `1` also makes the barrier of up to 6 ranks the linear one, which rank 0 leaves first, on any number of hosts)"},
		func(o *Options) *string { return &o.YieldWhenIdle }, parseYield)),
	mustAgree(option(EnvVar{"GOCCL_STRICT_CHECKS", "StrictChecks", "0",
		"`1`: a rank that only sends in a rooted collective (broadcast or scatter root, reduce or gather leaf) returns once its receivers checked the call, so that a disagreement fails that call on every rank; `0`: it returns once its data is sent, and a disagreement fails a later call (usually the next; in a run of small broadcasts over shared memory up to 128 later) or Close"},
		func(o *Options) *bool { return &o.StrictChecks }, parseBit)),
	option(EnvVar{"GOCCL_TIMEOUT", "Timeout", "10m",
		"bound on one collective without a context deadline"},
		func(o *Options) *time.Duration { return &o.Timeout }, parseTimeout),
	option(EnvVar{"GOCCL_INIT_TIMEOUT", "InitTimeout", "5m",
		"bound on joining the job (Init without a context deadline), from when the rank has its secret (without gorun, `GOCCL_SECRET_WAIT` bounds the wait for the secret file); the rank hosting the store keeps it up 3 s more for ranks that never connected"},
		func(o *Options) *time.Duration { return &o.InitTimeout }, parseTimeout),
	option(EnvVar{"GOCCL_STALL_TIMEOUT", "StallTimeout", "60s",
		"no progress for this long starts the stall diagnosis (see Using goccl); not in the measurement at Init, where a rank may still be joining (`GOCCL_INIT_TIMEOUT` bounds it)"},
		func(o *Options) *time.Duration { return &o.StallTimeout }, parseTimeout),
	option(EnvVar{"GOCCL_SPIN_POLLS", "SpinPolls", strconv.Itoa(defaultSpinPolls),
		"empty polls before a blocking wait on the transports other than TCP (1 when the ranks of a host outnumber its cores)"},
		func(o *Options) *int { return &o.SpinPolls }, parsePositive),
	option(EnvVar{"GOCCL_SOCKET_IFNAME", "SocketInterface", "",
		"interface whose address the TCP transport advertises; unset: the address the rank reached the bootstrap store from"},
		func(o *Options) *string { return &o.SocketInterface }, parseString),
	option(EnvVar{"GOCCL_SOCKET_TIMEOUT", "SocketTimeout", "10s",
		"how long unacknowledged data may sit on a TCP connection before the link is declared dead"},
		func(o *Options) *time.Duration { return &o.SocketTimeout }, parseTimeout),
	option(EnvVar{"GOCCL_TCP_CONGESTION", "TCPCongestion", "",
		"congestion control of the TCP connections (TCP_CONGESTION); unset: `reno` (a system default of BBR paces each connection with timers and halved large transfers; cubic's HyStart leaves slow start early where ranks outnumber cores and took twice reno's time there); `system` keeps the system's default"},
		func(o *Options) *string { return &o.TCPCongestion }, parseCongestion),
	withDefaultBy("the TCP transport", option(EnvVar{"GOCCL_SPIN_TIME", "SpinTime", "50us",
		"how long a TCP wait polls its sockets before it sleeps in poll(2) (`0s` sleeps at once)"},
		func(o *Options) *time.Duration { return &o.SpinTime }, parseSpinTime)),
	option(EnvVar{"GOCCL_IB_HCA", "IBHCA", "",
		"verbs devices and ports, NCCL's syntax (`mlx5`, `=rxe0`, `^mlx5_1`, `mlx5_0:1`); unset: every device"},
		func(o *Options) *string { return &o.IBHCA }, parseString),
	option(EnvVar{"GOCCL_IB_GID_INDEX", "IBGIDIndex", "",
		"verbs GID table index; unset: the RoCE v2 GID of an IPv4 address, else the first RoCE v2, else the first RoCE v1 GID (index 0 on InfiniBand)"},
		func(o *Options) **int { return &o.IBGIDIndex }, parseGIDIndex),
	option(EnvVar{"GOCCL_SIMD", "SIMD", "",
		"reduction kernels: `auto` (AVX-512 or AVX2 when the CPU has them), `off` (portable Go), `avx2`, `avx512`; process-wide, applied when a communicator is created; a level the CPU lacks fails the creation. Every level gives the same bits. Unset: as they are (`auto` unless `collectives.SetSIMD` chose)"},
		func(o *Options) *string { return &o.SIMD }, parseSIMD),
	option(EnvVar{"GOCCL_DEBUG", "Debug", "0",
		"anything but `0`: log algorithm choices, the cost model, connections and verbs devices (at debug level, whatever the logger's level)"},
		func(o *Options) *bool { return &o.Debug }, parseDebug),

	// The launcher's variables: bootstrap reads them.
	{EnvVar: EnvVar{"GOCCL_RANK", "", "", "set by gorun: this rank, 0 to N-1"}},
	{EnvVar: EnvVar{"GOCCL_SIZE", "", "", "set by gorun: the number of ranks N"}},
	{EnvVar: EnvVar{"GOCCL_LOCAL_RANK", "", "", "set by gorun: the rank's index among the ranks of its host"}},
	{EnvVar: EnvVar{"GOCCL_LOCAL_SIZE", "", "", "set by gorun: the number of ranks on the rank's host"}},
	{EnvVar: EnvVar{"GOCCL_BOOTSTRAP", "", "", "set by gorun: host:port of the bootstrap store"}},
	{EnvVar: EnvVar{"GOCCL_SECRET", "", "", "set by gorun: the hex secret that admits a rank to the store"}},
	{EnvVar: EnvVar{"GOCCL_SECRET_FILE", "", "", "without gorun: a file holding the job's shared secret; unset: `$HOME/.goccl/secret`, created by the store's host"}},
	{EnvVar: EnvVar{"GOCCL_SECRET_WAIT", "", bootstrap.SecretWait.String(), "without gorun: how long the other ranks wait for the secret file to appear"}},
}

func withDefaultBy(who string, e envVar) envVar {
	e.defaultBy = who
	return e
}

// OptionsFromEnv reads every GOCCL_* variable that sets an Options field
// (see Environment) through lookup (os.LookupEnv, or a test's map) and
// returns the Options they set: the fields of unset variables are zero,
// and a variable set to the empty string counts as unset. A malformed
// value is an error naming the variable and the value; every malformed
// variable is reported, joined.
//
// Init, New and NewWith apply it with os.LookupEnv to the fields their
// Options leave zero; nothing below them reads the environment.
func OptionsFromEnv(lookup func(string) (string, bool)) (Options, error) {
	var o Options
	err := o.applyEnv(lookup)
	return o, err
}

// applyEnv sets the fields of o left zero from the variables lookup finds
// set: explicit fields win, and a variable whose field is set is not even
// parsed.
func (o *Options) applyEnv(lookup func(string) (string, bool)) error {
	var errs []error
	for i := range envVars {
		e := &envVars[i]
		if e.set == nil || !e.unset(o) {
			continue
		}
		v, ok := lookup(e.Name)
		if !ok || v == "" {
			continue
		}
		if err := e.set(o, v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", e.Name, v, err))
		}
	}
	return errors.Join(errs...)
}

// Environment lists the environment variables goccl reads: those that
// set Options fields (OptionsFromEnv), then the launcher's, which package
// bootstrap reads. The README's table is made from it.
func Environment() []EnvVar {
	out := make([]EnvVar, len(envVars))
	for i := range envVars {
		out[i] = envVars[i].EnvVar
	}
	return out
}

// EnvironmentTable is the documentation's table of Environment, in
// Markdown.
func EnvironmentTable() string {
	var b strings.Builder
	b.WriteString("| variable | `Options` field | default | meaning |\n|---|---|---|---|\n")
	code := func(s string) string {
		if s == "" {
			return ""
		}
		return "`" + s + "`"
	}
	for _, e := range Environment() {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", e.Name, code(e.Field), code(e.Default), e.Meaning)
	}
	return b.String()
}

// The parsers of the variables' values. Their errors say what is wanted;
// applyEnv names the variable and the value.

func parseString(v string) (string, error) { return v, nil }

// parseCongestion takes a congestion control this host lets a socket have
// (tcp.CheckCongestion).
func parseCongestion(v string) (string, error) {
	if err := tcp.CheckCongestion(v); err != nil {
		return "", fmt.Errorf("not one this host allows: %w", err)
	}
	return v, nil
}

func parsePositive(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, errors.New("want a positive integer")
	}
	return n, nil
}

func parseWindow(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 2 {
		return 0, errors.New("want an integer of at least 2")
	}
	return n, nil
}

func parseChunkSize(v string) (int, error) {
	n, err := parsePositive(v)
	if err == nil {
		err = checkChunkSize(n)
	}
	return n, err
}

func parseTimeout(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, errors.New("want a positive duration such as 30s")
	}
	return d, nil
}

// parseSpinTime reads a duration of at least zero; "0s" (sleep at once) is
// the field's negative value, zero being the transport's default.
func parseSpinTime(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, errors.New("want a duration such as 200us")
	}
	if d == 0 {
		d = -1
	}
	return d, nil
}

func parseTransport(v string) (string, error) { return v, checkTransport(v) }

func parseYield(v string) (string, error) {
	switch v {
	case "", "auto", "0", "1":
		return v, nil
	}
	return "", fmt.Errorf("%q is not 0, 1 or auto", v)
}

func parseBind(v string) (string, error) {
	if !slices.Contains(affinity.Modes, v) {
		return "", fmt.Errorf("want one of %s", strings.Join(affinity.Modes, ", "))
	}
	return v, nil
}

func parseAlgoSpec(v string) (string, error) {
	_, err := collectives.ParseAlgoSpec(v)
	return v, err
}

func parseGIDIndex(v string) (*int, error) {
	i, err := strconv.Atoi(v)
	if err != nil || i < 0 {
		return nil, errors.New("want a non-negative integer")
	}
	return &i, nil
}

// parseSIMD accepts the levels collectives.SetSIMD knows that this CPU
// runs.
func parseSIMD(v string) (string, error) {
	have := collectives.SIMDLevels()
	switch {
	case v == "auto" || slices.Contains(have, v):
		return v, nil
	case v == "avx2" || v == "avx512":
		return "", fmt.Errorf("this CPU runs only %s", strings.Join(have, ", "))
	}
	return "", errors.New("want auto, off, avx2 or avx512")
}

// parseDebug: anything but "0" turns the debug lines on.
func parseDebug(v string) (bool, error) { return v != "0", nil }

// parseBit reads a 0 or 1 switch.
func parseBit(v string) (bool, error) {
	switch v {
	case "0":
		return false, nil
	case "1":
		return true, nil
	}
	return false, errors.New("want 0 or 1")
}

// parseBoard reads GOCCL_SHM_BOARD into NoShmBoard: 1 (the default) uses
// the board, 0 not.
func parseBoard(v string) (bool, error) {
	on, err := parseBit(v)
	return !on && err == nil, err
}

// agreedSettings is the text of o's settings that every rank of a job must
// share (the variables marked mustAgree): "GOCCL_SLOTS=8\n..." in the
// table's order.
func (o *Options) agreedSettings() string {
	var b strings.Builder
	for _, v := range envVars {
		if v.agree {
			fmt.Fprintf(&b, "%s=%s\n", v.Name, v.show(o))
		}
	}
	return b.String()
}

// settingsDiffer compares the ranks' agreedSettings: an error naming the
// first setting on which they differ and which ranks have which value.
// effect, if not nil, maps a line to what it does in this job, so that
// two spellings that end alike agree (see yieldEffect); the error quotes
// the lines as the ranks sent them.
func settingsDiffer(settings []string, effect func(line string) string) error {
	if len(settings) == 0 {
		return nil
	}
	if effect == nil {
		effect = func(line string) string { return line }
	}
	for r := range settings {
		if settings[r] == settings[0] {
			continue
		}
		mine, theirs := strings.Split(settings[0], "\n"), strings.Split(settings[r], "\n")
		for i := range min(len(mine), len(theirs)) {
			if mine[i] == theirs[i] || effect(mine[i]) == effect(theirs[i]) {
				continue
			}
			name, _, _ := strings.Cut(mine[i], "=")
			field := ""
			for _, v := range envVars {
				if v.Name == name {
					field = v.Field
				}
			}
			var order []string
			ranks := map[string][]int{}
			for q, st := range settings {
				val := ""
				if lines := strings.Split(st, "\n"); i < len(lines) {
					_, val, _ = strings.Cut(lines[i], "=")
				}
				if _, ok := ranks[val]; !ok {
					order = append(order, val)
				}
				ranks[val] = append(ranks[val], q)
			}
			parts := make([]string, len(order))
			for k, val := range order {
				parts[k] = fmt.Sprintf("%s %q", collectives.RankList(ranks[val]), val)
			}
			return fmt.Errorf("the ranks disagree on %s (Options.%s), which every rank must set alike: %s", name, field, strings.Join(parts, ", "))
		}
		if len(mine) != len(theirs) {
			return fmt.Errorf("the ranks' settings differ: rank 0 has %q, rank %d %q", settings[0], r, settings[r])
		}
	}
	return nil
}

// yieldEffect maps GOCCL_YIELD_WHEN_IDLE's line of agreedSettings to what
// the ranks must agree on: whether the selector takes the host as crowded
// (see exchangeHosts), the one part of the setting that is not each
// rank's own (how it waits). So "1" and "auto" agree where auto yields
// (ranks of one host that outnumber its processors), "0" and "auto" where
// it does not; nHosts and size are the job's, cpus the host's processors
// (the same for every rank when there is one host). Other lines are
// returned as they are.
func yieldEffect(nHosts, size, cpus int) func(line string) string {
	return func(line string) string {
		v, ok := strings.CutPrefix(line, "GOCCL_YIELD_WHEN_IDLE=")
		if !ok {
			return line
		}
		if v == "1" || (nHosts <= 1 && v != "0" && size > cpus) {
			return "GOCCL_YIELD_WHEN_IDLE crowded"
		}
		return "GOCCL_YIELD_WHEN_IDLE not crowded"
	}
}
