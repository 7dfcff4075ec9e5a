// Command asmgen writes package kernels' generated assembly and Go
// declarations into the current directory (run by go generate there).
package main

import (
	"fmt"
	"os"

	"github.com/goccl/goccl/collectives/internal/kernels/internal/asmgen"
)

func main() {
	files, err := asmgen.Files()
	if err != nil {
		fmt.Fprintln(os.Stderr, "asmgen:", err)
		os.Exit(1)
	}
	for name, data := range files {
		if err := os.WriteFile(name, data, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "asmgen:", err)
			os.Exit(1)
		}
	}
}
