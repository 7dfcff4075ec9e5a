package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/comm/commtest"
)

func TestBadFlags(t *testing.T) {
	var out, errb bytes.Buffer
	for _, args := range [][]string{{"-counts", "x"}, {"-counts", "-1"}, {"-types", "complex128"}, {"-buffers", "pinned"}, {"arg"}} {
		if code := run(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// The half types are refused where their checks would not be exact.
func TestHalfTypesLimit(t *testing.T) {
	if err := tooLarge([]string{"float32", "float16", "bfloat16"}, 64); err != nil {
		t.Errorf("64 ranks: %v", err)
	}
	err := tooLarge([]string{"float32", "bfloat16"}, 65)
	if err == nil || !strings.Contains(err.Error(), "bfloat16 is checked exactly up to 64 ranks") {
		t.Errorf("bfloat16 over 65 ranks: %v", err)
	}
	if err := tooLarge([]string{"float16"}, 513); err == nil {
		t.Error("float16 over 513 ranks: no error")
	}
	for name := range halfRanks {
		if _, ok := checks[name]; !ok {
			t.Errorf("%s has a limit but no check", name)
		}
	}
}

// TestUnderGorun runs one check of every collective in real processes
// under gorun over TCP, for 2 to 5 ranks (3: on registered buffers too).
func TestUnderGorun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries and starts processes; skipped with -short")
	}
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+string(os.PathSeparator), "./cmd/gorun", "./examples/collcheck")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	for n := 2; n <= 5; n++ {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			args := []string{"-n", fmt.Sprint(n), filepath.Join(dir, "collcheck"), "-counts", "0,7,1000", "-types", "float32,int32"}
			lines := 6
			if n == 3 { // and on registered buffers, showing progress
				args, lines = append(args, "-buffers", "plain,registered", "-progress"), 12
			}
			if n == 4 { // and the half types
				args[len(args)-1], lines = "float32,int32,float16,bfloat16", 12
			}
			cmd := exec.CommandContext(ctx, filepath.Join(dir, "gorun"), args...)
			cmd.Env = append(os.Environ(), "GOCCL_TRANSPORT=tcp")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("gorun: %v\n%s", err, out)
			}
			if got := strings.Count(string(out), "every collective and algorithm verified"); got != lines {
				t.Fatalf("%d verified lines, want %d:\n%s", got, lines, out)
			}
			// A progress line per collective and case from rank 0 with
			// -progress, none without.
			checks := len(commtest.Checks())
			want := 0
			if n == 3 {
				want = lines * checks
			}
			if got := strings.Count(string(out), "[0] collcheck: alltoallv done for "); got != want/checks {
				t.Fatalf("%d progress lines for alltoallv, want %d:\n%s", got, want/checks, out)
			}
			if got := strings.Count(string(out), " collectives, "); got != want {
				t.Fatalf("%d progress lines, want %d:\n%s", got, want, out)
			}
		})
	}
}
