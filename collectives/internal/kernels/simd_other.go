//go:build !amd64

package kernels

// No vector kernels on this architecture: the portable code runs.
func simdTables() (t [numLevels]*table) { return t }

func missing(l Level) string { return "no vector kernels for this architecture" }
