package bootstrap

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func mapLookup(m map[string]string) lookupFunc {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// with returns a copy of base with the given "K=V" entries added, and
// entries "K" (no '=') removed.
func with(base map[string]string, kv ...string) map[string]string {
	m := maps.Clone(base)
	for _, e := range kv {
		k, v, ok := strings.Cut(e, "=")
		if !ok {
			delete(m, k)
			continue
		}
		m[k] = v
	}
	return m
}

const secretHex = "00112233445566778899aabbccddeeff"

var (
	secretBytes = []byte{0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff}

	gorunBase = map[string]string{
		"GOCCL_RANK": "2", "GOCCL_SIZE": "4", "GOCCL_LOCAL_RANK": "2", "GOCCL_LOCAL_SIZE": "4",
		"GOCCL_BOOTSTRAP": "127.0.0.1:4242", "GOCCL_SECRET": secretHex,
	}
	torchBase = map[string]string{
		"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
		"MASTER_ADDR": "node0", "MASTER_PORT": "29500", "GOCCL_SECRET": secretHex,
	}
	slurmBase = map[string]string{
		"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "2", "SLURM_NODEID": "1",
		"SLURM_STEP_NODELIST": "n[3-5],x7", "SLURM_TASKS_PER_NODE": "3(x2),1,1",
		"SLURM_JOB_ID": "1234", "SLURM_STEP_ID": "0", "GOCCL_SECRET": secretHex,
	}
	ompiBase = map[string]string{
		"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "3",
		"OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "3",
		"PMIX_NAMESPACE": "prterun-host-1234@1", "GOCCL_SECRET": secretHex,
	}
)

func TestFromEnv(t *testing.T) {
	slurmPort := derivePort("1234.0.")
	ompiPort := derivePort("prterun-host-1234@1.")
	tests := []struct {
		name string
		env  map[string]string
		want Info   // compared when wantErr is ""
		err  string // substring of the expected error
	}{
		// gorun
		{"gorun", gorunBase, Info{2, 4, 2, 4, "127.0.0.1:4242", secretBytes, "gorun", false}, ""},
		{"gorun wins over torchrun", with(gorunBase, "RANK=7", "WORLD_SIZE=9"), Info{2, 4, 2, 4, "127.0.0.1:4242", secretBytes, "gorun", false}, ""},
		{"gorun no size", with(gorunBase, "GOCCL_SIZE"), Info{}, "GOCCL_SIZE is not set"},
		{"gorun bad rank", with(gorunBase, "GOCCL_RANK=two"), Info{}, `GOCCL_RANK="two" is not an integer`},
		{"gorun negative rank", with(gorunBase, "GOCCL_RANK=-1"), Info{}, `GOCCL_RANK="-1"`},
		{"gorun zero size", with(gorunBase, "GOCCL_SIZE=0"), Info{}, `GOCCL_SIZE="0" is not an integer >= 1`},
		{"gorun rank too big", with(gorunBase, "GOCCL_RANK=4"), Info{}, "rank 4 is not below size 4"},
		{"gorun local too big", with(gorunBase, "GOCCL_LOCAL_SIZE=5"), Info{}, "local size 5"},
		{"gorun empty local rank", with(gorunBase, "GOCCL_LOCAL_RANK="), Info{}, "GOCCL_LOCAL_RANK is empty"},
		{"gorun no bootstrap", with(gorunBase, "GOCCL_BOOTSTRAP"), Info{}, "GOCCL_BOOTSTRAP is not set"},
		{"gorun bad bootstrap", with(gorunBase, "GOCCL_BOOTSTRAP=localhost"), Info{}, `GOCCL_BOOTSTRAP="localhost" is not host:port`},
		{"gorun bootstrap port", with(gorunBase, "GOCCL_BOOTSTRAP=h:99999"), Info{}, `GOCCL_BOOTSTRAP="h:99999"`},
		{"gorun bootstrap no host", with(gorunBase, "GOCCL_BOOTSTRAP=:80"), Info{}, `GOCCL_BOOTSTRAP=":80"`},
		{"bad secret", with(gorunBase, "GOCCL_SECRET=xyz"), Info{}, "GOCCL_SECRET is not a hex string"},
		{"empty secret", with(gorunBase, "GOCCL_SECRET="), Info{}, "GOCCL_SECRET is empty"},

		// torchrun
		{"torchrun", torchBase, Info{5, 8, 1, 4, "node0:29500", secretBytes, "torchrun", false}, ""},
		{"torchrun rank 0 hosts", with(torchBase, "RANK=0"), Info{0, 8, 1, 4, "node0:29500", secretBytes, "torchrun", true}, ""},
		{"torchrun agent store", with(torchBase, "TORCHELASTIC_USE_AGENT_STORE=True"), Info{5, 8, 1, 4, "node0:29501", secretBytes, "torchrun", false}, ""},
		{"torchrun ipv6", with(torchBase, "MASTER_ADDR=fe80::1"), Info{5, 8, 1, 4, "[fe80::1]:29500", secretBytes, "torchrun", false}, ""},
		{"torchrun override", with(torchBase, "GOCCL_BOOTSTRAP=10.0.0.1:7000", "MASTER_ADDR"), Info{5, 8, 1, 4, "10.0.0.1:7000", secretBytes, "torchrun", false}, ""},
		{"torchrun no world size", with(torchBase, "WORLD_SIZE"), Info{}, "WORLD_SIZE is not set"},
		{"torchrun only world size", with(torchBase, "RANK"), Info{}, "RANK is not set"},
		{"torchrun no local world size", with(torchBase, "LOCAL_WORLD_SIZE"), Info{}, "LOCAL_WORLD_SIZE is not set"},
		{"torchrun no master", with(torchBase, "MASTER_ADDR"), Info{}, "MASTER_ADDR is not set"},
		{"torchrun bad port", with(torchBase, "MASTER_PORT=http"), Info{}, `MASTER_PORT="http" is not a port number`},
		{"torchrun port 0", with(torchBase, "MASTER_PORT=0"), Info{}, `MASTER_PORT="0" is not a port number`},
		{"torchrun agent store at 65535", with(torchBase, "TORCHELASTIC_USE_AGENT_STORE=True", "MASTER_PORT=65535"), Info{}, "MASTER_PORT=65535"},

		// Open MPI
		{"ompi local", ompiBase, Info{0, 3, 0, 3, fmt.Sprintf("127.0.0.1:%d", ompiPort), secretBytes, "ompi", true}, ""},
		{"ompi master port", with(ompiBase, "MASTER_PORT=5000"), Info{0, 3, 0, 3, "127.0.0.1:5000", secretBytes, "ompi", true}, ""},
		{"ompi multihost", with(ompiBase, "OMPI_COMM_WORLD_LOCAL_SIZE=2", "OMPI_COMM_WORLD_RANK=2", "OMPI_COMM_WORLD_LOCAL_RANK=1", "MASTER_ADDR=h0"), Info{2, 3, 1, 2, fmt.Sprintf("h0:%d", ompiPort), secretBytes, "ompi", false}, ""},
		{"ompi multihost no master", with(ompiBase, "OMPI_COMM_WORLD_LOCAL_SIZE=2"), Info{}, "set MASTER_ADDR"},
		{"ompi no namespace", with(ompiBase, "PMIX_NAMESPACE"), Info{}, "PMIX_NAMESPACE is not set"},
		{"ompi bad size", with(ompiBase, "OMPI_COMM_WORLD_SIZE=3x"), Info{}, `OMPI_COMM_WORLD_SIZE="3x"`},
		{"ompi wins over inherited slurm", with(ompiBase, "SLURM_PROCID=0", "SLURM_NTASKS=1"), Info{0, 3, 0, 3, fmt.Sprintf("127.0.0.1:%d", ompiPort), secretBytes, "ompi", true}, ""},

		// Slurm
		{"slurm", slurmBase, Info{5, 8, 2, 3, fmt.Sprintf("n3:%d", slurmPort), secretBytes, "slurm", false}, ""},
		{"slurm rank 0", with(slurmBase, "SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NODEID=0"), Info{0, 8, 0, 3, fmt.Sprintf("n3:%d", slurmPort), secretBytes, "slurm", true}, ""},
		{"slurm last node", with(slurmBase, "SLURM_PROCID=7", "SLURM_LOCALID=0", "SLURM_NODEID=3"), Info{7, 8, 0, 1, fmt.Sprintf("n3:%d", slurmPort), secretBytes, "slurm", false}, ""},
		{"slurm step vars win", with(slurmBase, "SLURM_STEP_TASKS_PER_NODE=2(x4)", "SLURM_STEP_NODELIST=gpu[07-10]", "SLURM_NODEID=2", "SLURM_LOCALID=1"), Info{5, 8, 1, 2, fmt.Sprintf("gpu07:%d", slurmPort), secretBytes, "slurm", false}, ""},
		{"slurm job nodelist", with(slurmBase, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST=a,b[1-2]"), Info{5, 8, 2, 3, fmt.Sprintf("a:%d", slurmPort), secretBytes, "slurm", false}, ""},
		{"slurm one node no nodeid", with(slurmBase, "SLURM_NODEID", "SLURM_TASKS_PER_NODE=8"), Info{5, 8, 2, 8, fmt.Sprintf("n3:%d", slurmPort), secretBytes, "slurm", false}, ""},
		{"slurm master", with(slurmBase, "MASTER_ADDR=login", "MASTER_PORT=6000"), Info{5, 8, 2, 3, "login:6000", secretBytes, "slurm", false}, ""},
		{"slurm no nodeid", with(slurmBase, "SLURM_NODEID"), Info{}, "SLURM_NODEID is not set"},
		{"slurm nodeid out of range", with(slurmBase, "SLURM_NODEID=4"), Info{}, "SLURM_NODEID=4"},
		{"slurm bad tasks per node", with(slurmBase, "SLURM_TASKS_PER_NODE=3(x2"), Info{}, `SLURM_TASKS_PER_NODE="3(x2"`},
		{"slurm no tasks per node", with(slurmBase, "SLURM_TASKS_PER_NODE"), Info{}, "SLURM_TASKS_PER_NODE is not set"},
		{"slurm bad nodelist", with(slurmBase, "SLURM_STEP_NODELIST=n[3-"), Info{}, "SLURM_STEP_NODELIST"},
		{"slurm no nodelist", with(slurmBase, "SLURM_STEP_NODELIST"), Info{}, "SLURM_STEP_NODELIST is not set"},
		{"slurm no job id", with(slurmBase, "SLURM_JOB_ID"), Info{}, "SLURM_JOB_ID is not set"},
		{"slurm no ntasks", with(slurmBase, "SLURM_NTASKS"), Info{}, "SLURM_NTASKS is not set"},
		{"slurm bad localid", with(slurmBase, "SLURM_LOCALID=a"), Info{}, `SLURM_LOCALID="a"`},
		{"slurm localid too big", with(slurmBase, "SLURM_LOCALID=3"), Info{}, "local rank 3"},

		// nothing
		{"none", map[string]string{"HOME": "/nonexistent"}, Info{}, "no launcher environment found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := fromEnv(mapLookup(tt.env))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one containing %q", err, tt.err)
				}
				if !strings.HasPrefix(err.Error(), "bootstrap: ") {
					t.Errorf("err %q does not start with the package name", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestFromEnvNoLauncher(t *testing.T) {
	_, err := fromEnv(mapLookup(nil))
	if !errors.Is(err, ErrNoLauncher) {
		t.Fatalf("err = %v, want ErrNoLauncher", err)
	}
}

func TestFromEnvSecretFiles(t *testing.T) {
	home := t.TempDir()
	file := filepath.Join(t.TempDir(), "s")
	if err := os.WriteFile(file, []byte(secretHex+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad")
	os.WriteFile(bad, []byte("not hex"), 0o600)
	base := with(torchBase, "GOCCL_SECRET", "HOME="+home, "GOCCL_SECRET_WAIT=200ms")

	t.Run("file", func(t *testing.T) {
		got, err := fromEnv(mapLookup(with(base, "GOCCL_SECRET_FILE="+file)))
		if err != nil || !reflect.DeepEqual(got.Secret, secretBytes) {
			t.Fatalf("secret %x, err %v", got.Secret, err)
		}
	})
	t.Run("file missing", func(t *testing.T) {
		_, err := fromEnv(mapLookup(with(base, "GOCCL_SECRET_FILE="+file+".none")))
		if err == nil || !strings.Contains(err.Error(), "GOCCL_SECRET_FILE") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("file malformed", func(t *testing.T) {
		_, err := fromEnv(mapLookup(with(base, "GOCCL_SECRET_FILE="+bad)))
		if err == nil || !strings.Contains(err.Error(), "GOCCL_SECRET_FILE "+bad+" is not a hex string") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("bad wait", func(t *testing.T) {
		_, err := fromEnv(mapLookup(with(base, "GOCCL_SECRET_WAIT=soon")))
		if err == nil || !strings.Contains(err.Error(), "GOCCL_SECRET_WAIT") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("no home", func(t *testing.T) {
		_, err := fromEnv(mapLookup(with(base, "HOME")))
		if err == nil || !strings.Contains(err.Error(), "set GOCCL_SECRET") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("non-host waits then gives up", func(t *testing.T) {
		start := time.Now()
		_, err := fromEnv(mapLookup(base)) // rank 5 does not host
		if err == nil || !strings.Contains(err.Error(), "did not appear within 200ms") {
			t.Fatalf("err = %v", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("gave up after %v", d)
		}
	})
	t.Run("host creates, others wait and read it", func(t *testing.T) {
		waiting := with(base, "GOCCL_SECRET_WAIT=10s")
		type res struct {
			s   []byte
			err error
		}
		others := make(chan res, 3)
		for range 3 {
			go func() {
				got, err := fromEnv(mapLookup(waiting))
				others <- res{got.Secret, err}
			}()
		}
		time.Sleep(100 * time.Millisecond)
		host, err := fromEnv(mapLookup(with(waiting, "RANK=0")))
		if err != nil {
			t.Fatal(err)
		}
		if len(host.Secret) != secretLen {
			t.Fatalf("created secret of %d bytes", len(host.Secret))
		}
		st, err := os.Stat(filepath.Join(home, ".goccl", "secret"))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("secret file: %v, mode %v", err, st.Mode())
		}
		for range 3 {
			r := <-others
			if r.err != nil || !reflect.DeepEqual(r.s, host.Secret) {
				t.Fatalf("waiting rank got %x, %v; want %x", r.s, r.err, host.Secret)
			}
		}
		again, err := fromEnv(mapLookup(with(waiting, "RANK=0")))
		if err != nil || !reflect.DeepEqual(again.Secret, host.Secret) {
			t.Fatalf("second host run: %x, %v; want the existing secret", again.Secret, err)
		}
	})
}

// Racing creators all end up with the one secret that landed.
func TestCreateSecretFileRace(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".goccl", "secret")
	const n = 8
	got := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); got[i], errs[i] = createSecretFile(path) }()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || !reflect.DeepEqual(got[i], got[0]) {
			t.Fatalf("creator %d: %x, %v; creator 0: %x", i, got[i], errs[i], got[0])
		}
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".secret-*"))
	if len(left) != 0 {
		t.Fatalf("temporary files left behind: %v", left)
	}
}

func TestExpandHostlist(t *testing.T) {
	tests := []struct {
		in   string
		want []string
		err  bool
	}{
		{"n0", []string{"n0"}, false},
		{"n[0-3],x7", []string{"n0", "n1", "n2", "n3", "x7"}, false},
		{"gpu[08-11]", []string{"gpu08", "gpu09", "gpu10", "gpu11"}, false},
		{"a[1,3-4]b", []string{"a1b", "a3b", "a4b"}, false},
		{"r[1-2]n[0-1]", []string{"r1n0", "r1n1", "r2n0", "r2n1"}, false},
		{"a,b,c", []string{"a", "b", "c"}, false},
		{"", nil, true},
		{"a,,b", nil, true},
		{"n[3-1]", nil, true},
		{"n[", nil, true},
		{"n]", nil, true},
		{"n[1-]", nil, true},
		{"n[a-b]", nil, true},
		{"n[[1]]", nil, true},
		{"n[0-99999999]", nil, true},
		{"n[0-9999]m[0-9999]", nil, true},
	}
	for _, tt := range tests {
		got, err := expandHostlist(tt.in)
		if (err != nil) != tt.err || (!tt.err && !reflect.DeepEqual(got, tt.want)) {
			t.Errorf("expandHostlist(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestParseTasksPerNode(t *testing.T) {
	tests := []struct {
		in   string
		want []int
	}{
		{"4", []int{4}},
		{"2(x3)", []int{2, 2, 2}},
		{"2(x2),1,3(x1)", []int{2, 2, 1, 3}},
		{"", nil}, {"0", nil}, {"2(x0)", nil}, {"2(3)", nil}, {"2(x3", nil}, {"x", nil}, {"1,", nil}, {"-1", nil},
	}
	for _, tt := range tests {
		got, err := parseTasksPerNode(tt.in)
		if (err != nil) != (tt.want == nil) || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("parseTasksPerNode(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestExpandHostlistExported(t *testing.T) {
	got, err := ExpandHostlist("n[0-1],gpu07")
	if want := []string{"n0", "n1", "gpu07"}; err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ExpandHostlist = %q, %v; want %q", got, err, want)
	}
	if _, err := ExpandHostlist("n[1-"); err == nil {
		t.Errorf("ExpandHostlist accepted a broken list")
	}
}

// Derived store ports lie below Linux's default ephemeral range
// (32768-60999), where the local end of any connection of the host could
// hold the port and fail rank 0's listen.
func TestDerivedPortsBelowEphemeralRange(t *testing.T) {
	for i := range 100000 {
		id := fmt.Sprintf("prterun-host-%d@1.", i)
		if p := derivePort(id); p < 20000 || p >= 32768 {
			t.Fatalf("derivePort(%q) = %d, want 20000-32767", id, p)
		}
	}
}
