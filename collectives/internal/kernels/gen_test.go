package kernels

import (
	"bytes"
	"os"
	"testing"

	"github.com/goccl/goccl/collectives/internal/kernels/internal/asmgen"
)

// TestGeneratedFilesCurrent checks that the generated assembly and its Go
// declarations are what the generator in the tree writes.
func TestGeneratedFilesCurrent(t *testing.T) {
	files, err := asmgen.Files()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatalf("%v (run go generate in collectives/internal/kernels)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what internal/asmgen writes: run go generate in collectives/internal/kernels", name)
		}
	}
}
