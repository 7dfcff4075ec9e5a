package comm_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	. "github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/internal/logtest"
	"github.com/goccl/goccl/transport/mem"
	"github.com/goccl/goccl/transport/shm"
)

// lookup is os.LookupEnv over a map.
func lookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

// TestOptionsFromEnv: every variable that sets an Options field is parsed
// into its field.
func TestOptionsFromEnv(t *testing.T) {
	gid := 3
	for _, tc := range []struct {
		name string
		env  map[string]string
		want Options
	}{
		{"none", nil, Options{}},
		{"empty values count as unset", map[string]string{"GOCCL_CHUNK_SIZE": "", "GOCCL_TRANSPORT": ""}, Options{}},
		{"transport", map[string]string{"GOCCL_TRANSPORT": "tcp"}, Options{Transport: "tcp"}},
		{"bind", map[string]string{"GOCCL_BIND": "core"}, Options{Bind: "core"}},
		{"algo", map[string]string{"GOCCL_ALGO": "allreduce:tree,broadcast:pipeline"}, Options{Algorithms: "allreduce:tree,broadcast:pipeline"}},
		{"chunk size", map[string]string{"GOCCL_CHUNK_SIZE": "65536"}, Options{ChunkSize: 65536}},
		{"slots", map[string]string{"GOCCL_SLOTS": "4"}, Options{Slots: 4}},
		{"staging budget", map[string]string{"GOCCL_STAGING_BUDGET": "1048576"}, Options{StagingBudget: 1 << 20}},
		{"timeout", map[string]string{"GOCCL_TIMEOUT": "90s"}, Options{Timeout: 90 * time.Second}},
		{"init timeout", map[string]string{"GOCCL_INIT_TIMEOUT": "2m"}, Options{InitTimeout: 2 * time.Minute}},
		{"stall timeout", map[string]string{"GOCCL_STALL_TIMEOUT": "5s"}, Options{StallTimeout: 5 * time.Second}},
		{"spin polls", map[string]string{"GOCCL_SPIN_POLLS": "1"}, Options{SpinPolls: 1}},
		{"socket interface", map[string]string{"GOCCL_SOCKET_IFNAME": "eth1"}, Options{SocketInterface: "eth1"}},
		{"socket timeout", map[string]string{"GOCCL_SOCKET_TIMEOUT": "3s"}, Options{SocketTimeout: 3 * time.Second}},
		{"tcp congestion", map[string]string{"GOCCL_TCP_CONGESTION": "system"}, Options{TCPCongestion: "system"}},
		{"spin time", map[string]string{"GOCCL_SPIN_TIME": "200us"}, Options{SpinTime: 200 * time.Microsecond}},
		{"spin time 0s sleeps at once", map[string]string{"GOCCL_SPIN_TIME": "0s"}, Options{SpinTime: -1}},
		{"hca", map[string]string{"GOCCL_IB_HCA": "=rxe0"}, Options{IBHCA: "=rxe0"}},
		{"gid index", map[string]string{"GOCCL_IB_GID_INDEX": "3"}, Options{IBGIDIndex: &gid}},
		{"simd", map[string]string{"GOCCL_SIMD": "off"}, Options{SIMD: "off"}},
		{"debug", map[string]string{"GOCCL_DEBUG": "1"}, Options{Debug: true}},
		{"debug 0 is off", map[string]string{"GOCCL_DEBUG": "0"}, Options{}},
		{"board off", map[string]string{"GOCCL_SHM_BOARD": "0"}, Options{NoShmBoard: true}},
		{"board on", map[string]string{"GOCCL_SHM_BOARD": "1"}, Options{}},
		{"launcher variables set no option", map[string]string{"GOCCL_RANK": "1", "GOCCL_SIZE": "2", "GOCCL_SECRET_WAIT": "1s"}, Options{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := OptionsFromEnv(lookup(tc.env))
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// TestOptionsFromEnvCoversTheTable: the table above sets every variable
// that has an Options field.
func TestOptionsFromEnvCoversTheTable(t *testing.T) {
	for _, e := range Environment() {
		if e.Field == "" {
			continue
		}
		v := map[string]string{"GOCCL_TRANSPORT": "tcp", "GOCCL_BIND": "auto", "GOCCL_ALGO": "allreduce:ring", "GOCCL_SOCKET_IFNAME": "lo",
			"GOCCL_IB_HCA": "mlx5", "GOCCL_SIMD": "off", "GOCCL_DEBUG": "1", "GOCCL_SPIN_TIME": "1ms",
			"GOCCL_IB_GID_INDEX": "1", "GOCCL_SHM_BOARD": "0", "GOCCL_TCP_CONGESTION": "reno", "GOCCL_STRICT_CHECKS": "1"}[e.Name]
		if v == "" {
			v = e.Default
		}
		if v == "" {
			t.Fatalf("%s: no test value", e.Name)
		}
		got, err := OptionsFromEnv(lookup(map[string]string{e.Name: v}))
		require.NoError(t, err, e.Name)
		require.NotEqual(t, Options{}, got, "%s=%s set no field", e.Name, v)
	}
}

// TestOptionsFromEnvRejects: a malformed value is an error naming the
// variable and the value, and every malformed variable is reported.
func TestOptionsFromEnvRejects(t *testing.T) {
	for name, bad := range map[string][]string{
		"GOCCL_TRANSPORT":      {"rdma", "TCP"},
		"GOCCL_BIND":           {"socket", "Core"},
		"GOCCL_SHM_BOARD":      {"yes", "2"},
		"GOCCL_ALGO":           {"allreduce", "bcast:binomial", "allreduce:nonesuch"},
		"GOCCL_CHUNK_SIZE":     {"abc", "0", "-1", "64", "1023", "67108865"},
		"GOCCL_SLOTS":          {"x", "0", "-3", "1.5"},
		"GOCCL_STAGING_BUDGET": {"1e6", "0"},
		"GOCCL_TIMEOUT":        {"10", "0s", "-1m", "soon"},
		"GOCCL_INIT_TIMEOUT":   {"5", "0m"},
		"GOCCL_STALL_TIMEOUT":  {"60", "-1s"},
		"GOCCL_SPIN_POLLS":     {"many", "0"},
		"GOCCL_SOCKET_TIMEOUT": {"10", "0s"},
		"GOCCL_SPIN_TIME":      {"50", "-1us"},
		"GOCCL_IB_GID_INDEX":   {"-1", "first"},
		"GOCCL_SIMD":           {"avx3", "sse"},
		// Checked on a socket, as each connection would be: before, a
		// name the host refuses failed at the first connection, every
		// rank blaming another (a helper's hunt).
		"GOCCL_TCP_CONGESTION": {"bogus", "RENO"},
	} {
		for _, v := range bad {
			_, err := OptionsFromEnv(lookup(map[string]string{name: v}))
			require.Error(t, err, "%s=%s", name, v)
			require.Contains(t, err.Error(), name+"=\""+v+"\"")
		}
	}
	_, err := OptionsFromEnv(lookup(map[string]string{"GOCCL_SLOTS": "x", "GOCCL_TIMEOUT": "soon"}))
	require.ErrorContains(t, err, `GOCCL_SLOTS="x": want a positive integer`)
	require.ErrorContains(t, err, `GOCCL_TIMEOUT="soon": want a positive duration`)
}

// A SIMD level this CPU lacks is refused by name at the boundary.
func TestOptionsFromEnvSIMDLevelMissing(t *testing.T) {
	have := strings.Join(collectives.SIMDLevels(), ",")
	for _, l := range []string{"avx2", "avx512"} {
		if strings.Contains(have, l) {
			continue
		}
		_, err := OptionsFromEnv(lookup(map[string]string{"GOCCL_SIMD": l}))
		require.ErrorContains(t, err, `GOCCL_SIMD="`+l+`": this CPU runs only`)
	}
}

var update = flag.Bool("update", false, "rewrite the README's environment table from comm.Environment")

// The README's environment table is Environment's (EnvironmentTable).
func TestREADMEEnvironmentTable(t *testing.T) {
	const path = "../README.md"
	const begin, end = "<!-- environment:begin -->\n", "<!-- environment:end -->"
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	doc := string(b)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	require.True(t, i >= 0 && j > i, "README.md has no %q ... %q section", begin, end)
	want := EnvironmentTable()
	if got := doc[i+len(begin) : j]; got != want {
		if *update {
			require.NoError(t, os.WriteFile(path, []byte(doc[:i+len(begin)]+want+doc[j:]), 0o644))
			return
		}
		t.Errorf("README.md's environment table is not comm.Environment's; run go test ./comm -run TestREADMEEnvironmentTable -update\ngot:\n%s\nwant:\n%s", got, want)
	}
}

// TestLoggerReceivesDebugLines: the debug lines (algorithm choices) go to
// Options.Logger when it takes debug records, or when Debug (GOCCL_DEBUG)
// is set whatever its level, and nowhere otherwise.
func TestLoggerReceivesDebugLines(t *testing.T) {
	opts := testOpts
	opts.Alpha, opts.Beta = 20e-6, 1e-9 // no measurement
	run := func(l *slog.Logger, debug bool) {
		o := opts
		o.Logger, o.Debug = l, debug
		runRanks(t, 2, o, func(c *Comm) error {
			buf := []float32{1, 2}
			return Allreduce(context.Background(), c, buf, buf, Sum)
		})
	}
	const line = "allreduce(8 bytes) #1: algorithm "

	var all logtest.Recorder // takes every level
	run(all.Logger(), false)
	for r := range 2 {
		require.Equal(t, 1, all.Count(fmt.Sprintf("DEBUG goccl: rank %d: %s", r, line)), "rank %d: a logger enabled for debug got:\n%s", r, all.String())
	}

	var out syncWriter
	info := slog.New(slog.NewTextHandler(&out, nil)) // Info level
	run(info, false)
	require.NotContains(t, out.String(), "level=DEBUG", "an Info-level logger got debug lines")
	run(info, true)
	require.Equal(t, 2, strings.Count(out.String(), line), "Debug on an Info-level logger:\n%s", out.String())
	require.Contains(t, out.String(), `level=DEBUG msg="goccl: rank 1: `+line)
	t.Setenv("GOCCL_DEBUG", "1")
	run(info, false)
	require.Equal(t, 4, strings.Count(out.String(), line), "GOCCL_DEBUG=1 on an Info-level logger:\n%s", out.String())
}

// TestRanksDisagreeOnASetting: ranks whose settings differ where every
// rank must set them alike (a variable set for some ranks only) fail at
// once on every rank, naming the variable and which ranks have which
// value. Before, ranks with and without the shared-memory board waited on
// one another in Init until the stall timeout and then blamed a rank "in
// no collective", and other differences (chunk size, slots, budget) failed
// in the first call naming a transport's bounds (a helper's hunt).
func TestRanksDisagreeOnASetting(t *testing.T) {
	for _, tc := range []struct {
		kind, want string
		set        func(o *Options)
	}{
		{"mem", `GOCCL_CHUNK_SIZE (Options.ChunkSize), which every rank must set alike: rank 0 "8192", ranks 1-2 "4096"`, func(o *Options) { o.ChunkSize = 8192 }},
		{"shm", `GOCCL_SHM_BOARD (Options.NoShmBoard), which every rank must set alike: rank 0 "true", ranks 1-2 "false"`, func(o *Options) { o.NoShmBoard = true }},
		{"mem", `GOCCL_STRICT_CHECKS (Options.StrictChecks), which every rank must set alike: rank 0 "true", ranks 1-2 "false"`, func(o *Options) { o.StrictChecks = true }},
		{"mem", `GOCCL_ALGO (Options.Algorithms), which every rank must set alike: rank 0 "allreduce:tree", ranks 1-2 "allreduce:ring,broadcast:binomial"`, func(o *Options) { o.Algorithms = "allreduce:tree" }},
		// The same settings spelt otherwise agree.
		{"mem", "", func(o *Options) {
			o.Algorithms = " broadcast:binomial , allreduce:ring"
			o.ChunkSize = 4096 + 7
			o.Transport = "auto"
		}},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			const n = 3
			g := NewLocalGroup(n)
			network := mem.NewNetwork(mem.Options{})
			errs := make([]error, n)
			start := time.Now()
			var wg sync.WaitGroup
			for r := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					o := Options{ChunkSize: 4096, Slots: 3, OwnDevice: true, StallTimeout: 20 * time.Second, Algorithms: "allreduce:ring,broadcast:binomial"}
					if r == 0 {
						tc.set(&o)
					}
					devs := Devices{Net: network.NewDevice()}
					if tc.kind == "shm" {
						d, err := shm.NewDevice(shm.Options{})
						if err != nil {
							errs[r] = err
							return
						}
						devs = Devices{Shm: d}
					}
					c, err := NewWith(ctx, g.Member(r), devs, o)
					if err == nil {
						c.Close()
					}
					errs[r] = err
				}()
			}
			wg.Wait()
			for r, err := range errs {
				if tc.want == "" && err != nil {
					t.Errorf("rank %d: %v, want none (the same settings)", r, err)
				}
				if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
					t.Errorf("rank %d: %v, want an error with %s", r, err, tc.want)
				}
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("took %v", d)
			}
			t.Log(errs[1])
		})
	}
}

// TestYieldSettingAgreesByEffect: GOCCL_YIELD_WHEN_IDLE set on some ranks
// only is refused where it changes what the selector chooses (whether the
// host is crowded), and accepted where it ends as the others' unset
// (auto) value: "1" beside auto on one host whose ranks outnumber its
// processors, "0" beside auto where they do not or on several hosts. Before,
// any difference of spelling failed Init.
func TestYieldSettingAgreesByEffect(t *testing.T) {
	const n = 3
	crowded := n > OnlineCPUs()
	for _, tc := range []struct {
		name      string
		hosts     bool // rank 0 on a host of its own
		yield     string
		wantAgree bool
	}{
		{"one host/1", false, "1", crowded},
		{"one host/0", false, "0", !crowded},
		{"two hosts/0", true, "0", true},
		{"two hosts/1", true, "1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			g := NewLocalGroup(n)
			network := mem.NewNetwork(mem.Options{})
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					o := Options{OwnDevice: true, StallTimeout: 20 * time.Second}
					if tc.hosts {
						o.HostID = "host b"
						if r == 0 {
							o.HostID = "host a"
						}
					}
					if r == 0 {
						o.YieldWhenIdle = tc.yield
					}
					c, err := NewWith(ctx, g.Member(r), Devices{Net: network.NewDevice()}, o)
					if err == nil {
						c.Close()
					}
					errs[r] = err
				}()
			}
			wg.Wait()
			want := fmt.Sprintf(`GOCCL_YIELD_WHEN_IDLE (Options.YieldWhenIdle), which every rank must set alike: rank 0 %q, ranks 1-2 "auto"`, tc.yield)
			for r, err := range errs {
				if tc.wantAgree && err != nil {
					t.Errorf("rank %d: %v, want none (%q ends as auto here)", r, err, tc.yield)
				}
				if !tc.wantAgree && (err == nil || !strings.Contains(err.Error(), want)) {
					t.Errorf("rank %d: %v, want an error with %s", r, err, want)
				}
			}
		})
	}
}
