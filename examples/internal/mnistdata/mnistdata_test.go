package mnistdata

import (
	"os"
	"path/filepath"
	"testing"
)

// TestDefaultDir: the data directory follows the go command's settings,
// also those made with `go env -w` (which write its environment file, not
// the environment): before, a module cache moved so was missed and the
// examples looked for the data under ~/go/pkg/mod.
func TestDefaultDir(t *testing.T) {
	tmp := t.TempDir()
	envFile := filepath.Join(tmp, "env")
	want := func(cache string) string {
		return filepath.Join(cache, "github.com/petar/!go!m!n!i!s!t@"+Version, "data")
	}
	t.Setenv("GOMNIST_DATA", "")
	t.Setenv("GOMODCACHE", "")
	t.Setenv("GOPATH", "")
	t.Setenv("GOENV", envFile)
	for _, c := range []struct {
		name, file, env, want string
	}{
		{"go env -w GOMODCACHE", "GOMODCACHE=/x/cache\n", "", want("/x/cache")},
		{"go env -w GOPATH", "GOPATH=/x/gopath:/y\n", "", want("/x/gopath/pkg/mod")},
		{"the environment first", "GOMODCACHE=/x/cache\n", "/e/cache", want("/e/cache")},
	} {
		if err := os.WriteFile(envFile, []byte(c.file), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Setenv("GOMODCACHE", c.env)
		if got := DefaultDir(); got != c.want {
			t.Errorf("%s: DefaultDir() = %s, want %s", c.name, got, c.want)
		}
	}
	t.Setenv("GOMNIST_DATA", "/d")
	if got := DefaultDir(); got != "/d" {
		t.Errorf("GOMNIST_DATA=/d: DefaultDir() = %s", got)
	}
}
