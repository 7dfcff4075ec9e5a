package doccheck

import (
	"bufio"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// mainPackages maps the name of each of the repository's commands (the
// base name of a directory holding package main) to its directory.
func mainPackages(t *testing.T) map[string]string {
	t.Helper()
	cmds := map[string]string{}
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return nil
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "package ") {
				if sc.Text() == "package main" {
					dir, _ := filepath.Rel(root, filepath.Dir(p))
					cmds[filepath.Base(dir)] = filepath.ToSlash(dir)
				}
				break
			}
		}
		return nil
	})
	if cmds["osu"] == "" || cmds["gorun"] == "" {
		t.Fatalf("found no osu or gorun command: %v", cmds)
	}
	return cmds
}

// gorun's options that take a value (gorun --help).
var gorunValueFlags = map[string]bool{
	"-n": true, "-H": true, "--hostfile": true, "-x": true, "--ssh": true, "--srun": true,
	"--launcher": true, "--bootstrap-addr": true, "--output-dir": true, "--timeout": true, "--grace": true,
}

var (
	builtRE = regexp.MustCompile(`^(\./)?bin/[A-Za-z0-9_-]+$|^/tmp/[A-Za-z0-9_-]+$`)
	envRE   = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`)
)

// programs returns the programs a shell command line runs: the first word
// of each command (after VAR=value assignments) and the program gorun
// starts.
func programs(line string) []string {
	line, _, _ = strings.Cut(line, "#")
	var progs []string
	for _, seg := range regexp.MustCompile(`&&|\|\||[;|]`).Split(line, -1) {
		f := strings.Fields(seg)
		for len(f) > 0 && envRE.MatchString(f[0]) {
			f = f[1:]
		}
		if len(f) == 0 {
			continue
		}
		progs = append(progs, f[0])
		if path.Base(f[0]) != "gorun" {
			continue
		}
		for i := 1; i < len(f); i++ {
			if !strings.HasPrefix(f[i], "-") {
				progs = append(progs, f[i])
				break
			}
			if gorunValueFlags[f[i]] {
				i++
			}
		}
	}
	return progs
}

// commands are a document's command lines: the lines of its code blocks,
// and its inline code that starts with a program of the repository
// ("gorun -n 2 osu allreduce" in a sentence is a command too).
func commands(d doc) []string {
	lines := append([]string(nil), d.blocks...)
	for _, m := range spanRE.FindAllStringSubmatch(d.prose, -1) {
		span := strings.Join(strings.Fields(m[1]), " ")
		first, _, hasArgs := strings.Cut(span, " ")
		if hasArgs && (first == "gorun" || builtRE.MatchString(first)) {
			lines = append(lines, span)
		}
	}
	return lines
}

// A document builds every program of the repository that its commands run,
// before running it, from a main package that exists (issue 11, item 16:
// the README ran "gorun -n 2 osu ..." and never built osu). gorun may
// appear bare where the README documents its command line.
func TestCommandsRunWhatTheDocumentBuilds(t *testing.T) {
	cmds := mainPackages(t)
	for _, md := range markdown(t) {
		d := parse(read(t, md))
		built := map[string]bool{}
		for _, line := range d.blocks {
			for _, seg := range strings.Split(line, "&&") {
				f := strings.Fields(seg)
				if len(f) < 2 || f[0] != "go" || f[1] != "build" {
					continue
				}
				out := ""
				var pkgs []string
				for i := 2; i < len(f); i++ {
					switch {
					case f[i] == "-o" && i+1 < len(f):
						out = f[i+1]
						i++
					case strings.HasPrefix(f[i], "./"):
						pkgs = append(pkgs, f[i])
					}
				}
				for _, p := range pkgs {
					p = strings.TrimPrefix(p, "./")
					if !slicesContainsValue(cmds, p) {
						t.Errorf("%s: go build %s: no main package there", md, p)
					}
					switch {
					case strings.HasSuffix(out, "/"):
						built[out+path.Base(p)] = true
					case out != "" && len(pkgs) == 1:
						built[out] = true
					}
				}
			}
			checkRuns(t, md, line, built, cmds)
		}
		for _, line := range commands(d)[len(d.blocks):] {
			checkRuns(t, md, line, built, cmds)
		}
	}
}

func checkRuns(t *testing.T, md, line string, built map[string]bool, cmds map[string]string) {
	t.Helper()
	for _, p := range programs(line) {
		name := strings.TrimPrefix(p, "./")
		switch {
		case builtRE.MatchString(p) && !built[name]:
			t.Errorf("%s: %q runs %s, which the document does not build before", md, line, p)
		case !strings.Contains(p, "/") && cmds[p] != "" && p != "gorun":
			t.Errorf("%s: %q runs %s, which is not installed anywhere: build it (go build -o bin/ ./%s) and run bin/%s", md, line, p, cmds[p], p)
		}
	}
}

func slicesContainsValue(m map[string]string, v string) bool {
	for _, x := range m {
		if x == v {
			return true
		}
	}
	return false
}

func TestPrograms(t *testing.T) {
	for line, want := range map[string]string{
		"bin/gorun -n 4 bin/allreduce -count 16777216":                         "bin/gorun bin/allreduce",
		"./scripts/install-deps.sh && go build -o bin/ ./cmd/gorun":            "./scripts/install-deps.sh go",
		"gorun -x OMP_NUM_THREADS=1 --timestamp --output-dir logs -n 4 ./prog": "gorun ./prog",
		"GOCCL_ALGO=ring bin/gorun -n 2 bin/osu allreduce >x.json # note":      "bin/gorun bin/osu",
		"gorun -n 2 osu allreduce -m 8:67108864 -c":                            "gorun osu",
		"/tmp/mnist -epochs 5 -json 1rank.json | tail":                         "/tmp/mnist tail",
	} {
		if got := strings.Join(programs(line), " "); got != want {
			t.Errorf("programs(%q) = %q, want %q", line, got, want)
		}
	}
}
