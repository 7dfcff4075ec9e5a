package doccheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestEnvironmentTableComplete: every GOCCL_* variable that non-test code
// of the module reads (a string literal "GOCCL_X" in a .go file outside
// tests and testdata) has a row in the README's environment table, and the
// table names no variable the code no longer reads. Variables only tests
// read (test children, corpus writers) are exempt.
func TestEnvironmentTableComplete(t *testing.T) {
	lit := regexp.MustCompile(`"(GOCCL_[A-Z0-9_]+)"`)
	used := map[string]string{} // variable -> a file that reads it
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "bin" ||
			(p != root && fileExists(filepath.Join(p, "go.mod")))) {
			return filepath.SkipDir // nested modules document themselves
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range lit.FindAllStringSubmatch(string(b), -1) {
			used[m[1]] = p
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	table := envTable(t, string(readme))
	for v, file := range used {
		if !table[v] {
			t.Errorf("%s reads %s, which the README's environment table does not list", file, v)
		}
	}
	for v := range table {
		if _, ok := used[v]; !ok {
			t.Errorf("the README's environment table lists %s, which no code reads", v)
		}
	}
}

// envTable returns the variables named in the first column of the
// README's "### Environment" table.
func envTable(t *testing.T, readme string) map[string]bool {
	t.Helper()
	i := strings.Index(readme, "### Environment")
	if i < 0 {
		t.Fatal("README has no ### Environment section")
	}
	names := map[string]bool{}
	name := regexp.MustCompile("`(GOCCL_[A-Z0-9_]+)`")
	for _, line := range strings.Split(readme[i:], "\n")[1:] {
		if strings.HasPrefix(line, "#") {
			break
		}
		if !strings.HasPrefix(line, "| ") {
			continue
		}
		first := strings.SplitN(line, "|", 3)[1]
		for _, m := range name.FindAllStringSubmatch(first, -1) {
			names[m[1]] = true
		}
	}
	return names
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
