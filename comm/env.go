package comm

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/goccl/goccl/collectives"
)

// envInt reads a positive integer from the environment; unset means def.
func envInt(name string, def int) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive integer", name, v)
	}
	return n, nil
}

// envDuration reads a positive duration ("30s", "10m"); unset means def.
func envDuration(name string, def time.Duration) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive duration such as 30s", name, v)
	}
	return d, nil
}

// simdFromEnv applies GOCCL_SIMD (auto, off, avx2, avx512) to the reduction
// kernels of the whole process; unset leaves them as they are (the best
// level of the CPU unless collectives.SetSIMD chose another). An unknown
// value or a level this CPU lacks is an error.
func simdFromEnv() error {
	v := os.Getenv("GOCCL_SIMD")
	if v == "" {
		return nil
	}
	if err := collectives.SetSIMD(v); err != nil {
		return fmt.Errorf("GOCCL_SIMD: %w", err)
	}
	return nil
}
