package peers

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

//go:embed drivers/mpi_bench.c drivers/gloo_bench.cc
var driverSources embed.FS

// A driver is a peer's benchmark program, its source, the Debian packages
// it needs and how to compile it.
type driver struct {
	name     string
	source   string   // in driverSources
	packages []string // Debian packages: the library, its headers, the compiler
	compile  func(src, out string) []string
}

var drivers = []driver{
	{
		name: "mpi_bench", source: "drivers/mpi_bench.c",
		packages: []string{"openmpi-bin", "libopenmpi-dev", "gcc"},
		compile: func(src, out string) []string {
			return []string{"mpicc", "-O2", "-Wall", "-o", out, src}
		},
	},
	{
		name: "gloo_bench", source: "drivers/gloo_bench.cc",
		packages: []string{"libgloo-dev", "g++"},
		compile: func(src, out string) []string {
			return []string{"g++", "-O2", "-std=c++17", "-Wall", "-o", out, src, "-lgloo", "-lhiredis", "-libverbs", "-lpthread"}
		},
	},
}

func driverNamed(name string) *driver {
	for i := range drivers {
		if drivers[i].name == name {
			return &drivers[i]
		}
	}
	return nil
}

// DefaultDir is where Build puts the drivers unless told otherwise: a
// directory of the user's cache named after the drivers' sources, so that
// a changed source is rebuilt and an unchanged one is not.
func DefaultDir() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("peers: no cache directory for the drivers (set -bin): %w", err)
	}
	h := sha256.New()
	for _, d := range drivers {
		b, _ := driverSources.ReadFile(d.source)
		h.Write(b)
		fmt.Fprintln(h, d.compile("SRC", "OUT"))
	}
	return filepath.Join(cache, "goccl", "peers-"+hex.EncodeToString(h.Sum(nil))[:12]), nil
}

// BuildOptions says which drivers Build makes, where, and whether it may
// install packages.
type BuildOptions struct {
	Dir     string   // where the drivers go; "" is DefaultDir()
	Peers   []string // whose drivers; nil means every peer's
	Install bool     // install missing Debian packages with apt-get (as root, or with sudo)
	Log     io.Writer
}

// ErrMissing is wrapped by Build's error when a package or tool a driver
// needs is missing and BuildOptions.Install is false.
var ErrMissing = errors.New("missing")

// Build makes the drivers of the peers asked for, from the sources embedded
// in this package, and returns their directory. It installs the Debian
// packages they need when they are missing and o.Install is set (apt-get
// update first when the package lists are more than a day old), and
// compiles a driver only when its binary is absent. It is safe to run
// again; a binary appears whole or not at all.
func Build(ctx context.Context, o BuildOptions) (string, error) {
	dir := o.Dir
	if dir == "" {
		var err error
		if dir, err = DefaultDir(); err != nil {
			return "", err
		}
	}
	log := o.Log
	if log == nil {
		log = io.Discard
	}
	names := o.Peers
	if names == nil {
		names = PeerNames()
	}
	var need []*driver
	for _, name := range names {
		p := PeerNamed(name)
		if p == nil {
			return "", fmt.Errorf("peers: unknown peer %q", name)
		}
		if d := driverNamed(p.Driver); d != nil && !slices.Contains(need, d) { // floor-tcp's is goccl's own
			need = append(need, d)
		}
	}
	var todo []*driver
	var pkgs []string
	for _, d := range need {
		if _, err := os.Stat(filepath.Join(dir, d.name)); err == nil {
			continue
		}
		todo = append(todo, d)
		for _, p := range d.packages {
			if !slices.Contains(pkgs, p) {
				pkgs = append(pkgs, p)
			}
		}
	}
	if len(todo) == 0 {
		return dir, nil
	}
	if missing := missingPackages(pkgs); len(missing) > 0 {
		if !o.Install {
			return "", fmt.Errorf("peers: %w Debian packages %s (apt-get install %s, or let the harness install them)",
				ErrMissing, strings.Join(missing, " "), strings.Join(missing, " "))
		}
		if err := install(ctx, missing, log); err != nil {
			return "", err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("peers: %w", err)
	}
	for _, d := range todo {
		if err := d.build(ctx, dir, log); err != nil {
			return "", err
		}
	}
	return dir, nil
}

func (d *driver) build(ctx context.Context, dir string, log io.Writer) error {
	src, _ := driverSources.ReadFile(d.source)
	tmp, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return fmt.Errorf("peers: build %s: %w", d.name, err)
	}
	defer os.RemoveAll(tmp)
	srcPath := filepath.Join(tmp, filepath.Base(d.source))
	if err := os.WriteFile(srcPath, src, 0o644); err != nil {
		return fmt.Errorf("peers: build %s: %w", d.name, err)
	}
	out := filepath.Join(tmp, d.name)
	argv := d.compile(srcPath, out)
	if _, err := exec.LookPath(argv[0]); err != nil {
		return fmt.Errorf("peers: build %s: %w %s (packages %s): %v", d.name, ErrMissing, argv[0], strings.Join(d.packages, " "), err)
	}
	fmt.Fprintf(log, "peers: building %s: %s\n", d.name, strings.Join(argv, " "))
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("peers: build %s: %s: %v\n%s", d.name, strings.Join(argv, " "), err, bytes.TrimSpace(b))
	}
	if err := os.Rename(out, filepath.Join(dir, d.name)); err != nil {
		return fmt.Errorf("peers: build %s: %w", d.name, err)
	}
	return nil
}

// missingPackages lists those of pkgs that dpkg does not report installed.
// Without dpkg (not Debian) it reports none, and the build says what tool
// is missing.
func missingPackages(pkgs []string) []string {
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		return nil
	}
	var missing []string
	for _, p := range pkgs {
		out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", p).Output()
		if err != nil || !strings.Contains(string(out), "install ok installed") {
			missing = append(missing, p)
		}
	}
	return missing
}

// install runs apt-get install for pkgs, as scripts/install-deps.sh does:
// non-interactive, no recommended packages, an update first when the lists
// are missing or older than a day, sudo when not root.
func install(ctx context.Context, pkgs []string, log io.Writer) error {
	var sudo []string
	if os.Geteuid() != 0 {
		sudo = []string{"sudo"}
	}
	run := func(args ...string) error {
		argv := append(slices.Clone(sudo), args...)
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("peers: %s: %v\n%s", strings.Join(argv, " "), err, bytes.TrimSpace(b))
		}
		return nil
	}
	if !freshLists("/var/lib/apt/lists", 24*time.Hour) {
		fmt.Fprintf(log, "peers: apt-get update\n")
		if err := run("apt-get", "-o", "DPkg::Lock::Timeout=900", "update", "-qq"); err != nil {
			return err
		}
	}
	fmt.Fprintf(log, "peers: installing %s\n", strings.Join(pkgs, " "))
	return run(append([]string{"apt-get", "-o", "DPkg::Lock::Timeout=900", "install", "-y", "-qq", "--no-install-recommends"}, pkgs...)...)
}

// freshLists reports whether dir holds a package list younger than age.
func freshLists(dir string, age time.Duration) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if !strings.Contains(e.Name(), "Packages") {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) < age {
			return true
		}
	}
	return false
}
