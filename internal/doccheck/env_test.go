package doccheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/goccl/goccl/comm"
)

// TestEnvironmentTableComplete: every GOCCL_* variable that non-test code
// of the module reads (a string literal "GOCCL_X" in a .go file outside
// tests and testdata) is in comm.Environment, the one table the README's
// environment table is generated from (comm's TestREADMEEnvironmentTable
// checks the README against it), and the table names no variable the code
// no longer reads. Variables only tests read (test children, corpus
// writers) are exempt.
func TestEnvironmentTableComplete(t *testing.T) {
	lit := regexp.MustCompile(`"(GOCCL_[A-Z0-9_]+)"`)
	used := map[string][]string{} // variable -> the files that name it
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
			used[m[1]] = append(used[m[1]], p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	table := map[string]bool{}
	for _, e := range comm.Environment() {
		table[e.Name] = true
	}
	const tableFile = "comm/environment.go"
	for v, files := range used {
		if !table[v] {
			t.Errorf("%s reads %s, which comm.Environment (%s) does not list", files[0], v, tableFile)
		}
	}
	for v := range table {
		readers := 0
		for _, f := range used[v] {
			if !strings.HasSuffix(f, tableFile) {
				readers++
			}
		}
		if readers == 0 && !optionVar(v) {
			t.Errorf("comm.Environment lists %s, which no code outside the table reads", v)
		}
	}
}

// optionVar says that comm's table itself reads v (OptionsFromEnv): a
// variable with an Options field.
func optionVar(v string) bool {
	for _, e := range comm.Environment() {
		if e.Name == v {
			return e.Field != ""
		}
	}
	return false
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
