package peers

import (
	"reflect"
	"strings"
	"testing"
)

func TestSizes(t *testing.T) {
	for _, c := range []struct {
		op   string
		np   int
		min  int
		max  int
		want []int
	}{
		{"allreduce", 2, 1, 64, []int{4, 8, 16, 32, 64}}, // a float32 needs 4 bytes
		{"latency", 2, 1, 8, []int{1, 2, 4, 8}},          // bytes
		{"reduce_scatter", 4, 4, 64, []int{16, 32, 64}},  // size/4/np elements per rank
		{"alltoall", 8, 8, 8, []int{8}},                  // a block per rank
		{"bcast", 2, 3, 24, []int{6, 12, 24}},            // doubling from MIN as osu -m
		{"reduce_scatter", 3, 8, 8, nil},
		{"gather", 8, 2, 16, []int{4, 8, 16}},  // a block per rank
		{"scatter", 8, 2, 16, []int{4, 8, 16}}, // a block per rank
		{"reduce", 3, 4, 8, []int{4, 8}},       // the buffer
	} {
		if got := Sizes(c.op, c.np, c.min, c.max); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Sizes(%s, np %d, %d:%d) = %v, want %v", c.op, c.np, c.min, c.max, got, c.want)
		}
	}
}

func validConfig() Config {
	return Config{Op: "allreduce", NP: 2, Min: 8, Max: 1024, Iters: 10, Warmup: 2, Rounds: 3, Peers: []string{"mpi-tcp", "gloo-tcp"}}
}

func TestValidate(t *testing.T) {
	c := validConfig()
	if err := c.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, bad := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Op = "allreduse" }, `unknown operation "allreduse"`},
		{func(c *Config) { c.NP = 1 }, "at least 2 ranks"},
		{func(c *Config) { c.Op, c.NP = "latency", 3 }, "latency runs on exactly 2 ranks"},
		{func(c *Config) { c.Min = 0 }, "1 <= MIN <= MAX"},
		{func(c *Config) { c.Min, c.Max = 64, 8 }, "1 <= MIN <= MAX"},
		{func(c *Config) { c.Min, c.Max = 1, 2 }, "no size in 1:2"},
		{func(c *Config) { c.Iters = 0 }, "at least 1 iteration"},
		{func(c *Config) { c.Rounds = 0 }, "1 round"},
		{func(c *Config) { c.Peers = []string{"nccl"} }, `unknown peer "nccl" (have mpi-tcp, mpi-shm, gloo-tcp, floor-tcp)`},
		{func(c *Config) { c.Peers = []string{"mpi-tcp", "floor-tcp"} }, "floor-tcp times latency and bcast of 2 ranks up to 1 MiB"},
		{func(c *Config) { c.Op, c.NP, c.Peers = "bcast", 4, []string{"floor-tcp"} }, "not bcast of 4 ranks"},
		{func(c *Config) { c.Op, c.Max, c.Peers = "bcast", 2<<20, []string{"floor-tcp"} }, "up to 2097152 bytes"},
		{func(c *Config) { c.Peers = []string{"mpi-tcp", "mpi-tcp"} }, "named twice"},
		{func(c *Config) { c.GlooAlgo = "bcube" }, `unknown Gloo allreduce "bcube"`},
		{func(c *Config) { c.Method = "nccl" }, `unknown timing method "nccl" (have osu, b2b)`},
	} {
		c := validConfig()
		bad.edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: err %v, want %q", c, err, bad.want)
		}
	}
}

func TestGocclCommand(t *testing.T) {
	c := validConfig()
	want := "bin/gorun -n 2 bin/osu allreduce -m 8:1024 -i 10 -x 2 -T float32"
	if got := strings.Join(GocclCommand(&c, "bin/gorun", "bin/osu"), " "); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	c.Op, c.Transport = "latency", "tcp"
	want = "bin/gorun -n 2 bin/osu latency -m 8:1024 -i 10 -x 2 --transport tcp"
	if got := strings.Join(GocclCommand(&c, "bin/gorun", "bin/osu"), " "); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	// Back to back: osu --back-to-back, but latency is a ping-pong either way.
	c = validConfig()
	c.Method = MethodB2B
	want = "bin/gorun -n 2 bin/osu allreduce -m 8:1024 -i 10 -x 2 -T float32 --back-to-back"
	if got := strings.Join(GocclCommand(&c, "bin/gorun", "bin/osu"), " "); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	c.Op = "latency"
	if got := strings.Join(GocclCommand(&c, "bin/gorun", "bin/osu"), " "); strings.Contains(got, "back") {
		t.Errorf("latency, back to back: %q", got)
	}
	// osu's default memory limit (512 MiB) would cut 4 ranks x 256 MiB.
	c = validConfig()
	c.Op, c.NP, c.Max = "alltoall", 4, 256<<20
	if got := strings.Join(GocclCommand(&c, "g", "o"), " "); !strings.HasSuffix(got, " -M 1073741824") {
		t.Errorf("got %q, want a raised -M", got)
	}
}

func TestPeerProcs(t *testing.T) {
	c := validConfig()
	c.NP = 3
	tcp := PeerNamed("mpi-tcp").procs("/d", &c, "/s")
	want := "mpirun --allow-run-as-root --oversubscribe --bind-to none -x MALLOC_MMAP_MAX_ -x MALLOC_TRIM_THRESHOLD_ -np 3 " +
		"--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo /d/mpi_bench allreduce 8 1024 10 2"
	if len(tcp) != 1 || strings.Join(tcp[0].argv, " ") != want || !reflect.DeepEqual(tcp[0].env, mallocEnv) {
		t.Errorf("mpi-tcp: %+v\nwant %s", tcp, want)
	}
	shm := PeerNamed("mpi-shm").procs("/d", &c, "/s")
	if len(shm) != 1 || !strings.Contains(strings.Join(shm[0].argv, " "), "--mca btl vader,self /d/mpi_bench") {
		t.Errorf("mpi-shm: %+v", shm)
	}
	gloo := PeerNamed("gloo-tcp").procs("/d", &c, "/s")
	if len(gloo) != 3 {
		t.Fatalf("gloo-tcp: %d processes for 3 ranks", len(gloo))
	}
	for r, p := range gloo {
		if strings.Join(p.argv, " ") != "/d/gloo_bench allreduce 8 1024 10 2" {
			t.Errorf("gloo rank %d: argv %q", r, p.argv)
		}
		env := strings.Join(p.env, " ")
		for _, kv := range []string{"RANK=" + string(rune('0'+r)), "WORLD_SIZE=3", "GLOO_STORE=/s", "GLOO_ALLREDUCE=torch", "MALLOC_MMAP_MAX_=0"} {
			if !strings.Contains(" "+env+" ", " "+kv+" ") {
				t.Errorf("gloo rank %d: env %q lacks %s", r, env, kv)
			}
		}
	}
	// floor-tcp: the repository's bin/tcpfloor, in OSU-style rows.
	c.Op, c.NP = "bcast", 2
	floor := PeerNamed("floor-tcp").procs("/d", &c, "/s")
	if want := "bin/tcpfloor bcast -m 8:1024 -i 10 -x 2 -osu-rows"; len(floor) != 1 || strings.Join(floor[0].argv, " ") != want {
		t.Errorf("floor-tcp: %+v\nwant %s", floor, want)
	}
	c.Method = MethodB2B
	if floor := PeerNamed("floor-tcp").procs("/d", &c, "/s"); len(floor) != 1 || !strings.HasSuffix(strings.Join(floor[0].argv, " "), " -osu-rows -b2b") {
		t.Errorf("floor-tcp back to back: %+v", floor)
	}
	// Back to back: the drivers' last argument.
	c.Op, c.NP = "allreduce", 3
	for _, name := range PeerNames() {
		if name == "floor-tcp" {
			continue
		}
		for _, p := range PeerNamed(name).procs("/d", &c, "/s") {
			if !strings.HasSuffix(strings.Join(p.argv, " "), "allreduce 8 1024 10 2 b2b") {
				t.Errorf("%s back to back: argv %q", name, p.argv)
			}
		}
	}
}
