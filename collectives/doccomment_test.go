package collectives

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"strings"
	"testing"
)

// TestExportedDocsNameTheirFunc: every exported function of the package
// has a doc comment, and it is its own (it starts with the function's
// name). A comment inserted between a function's doc and its declaration
// takes the doc with it: RunsAs's comment, added in the middle of
// HierRingAllreduce's, left HierRingAllreduce undocumented and RunsAs
// documented as HierRingAllreduce.
func TestExportedDocsNameTheirFunc(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range pkgs {
		for name, f := range pkg.Files {
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok || fn.Recv != nil || !fn.Name.IsExported() {
					continue
				}
				doc := fn.Doc.Text()
				if !strings.HasPrefix(doc, fn.Name.Name+" ") {
					first, _, _ := strings.Cut(doc, "\n")
					t.Errorf("%s: func %s: doc comment %q does not start with its name", name, fn.Name.Name, first)
				}
			}
		}
	}
}
