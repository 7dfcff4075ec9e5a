package bootstrap

import (
	"os"
	"strconv"
)

// RankFromEnv returns the rank that the launcher's environment gives this
// process (the same variables and precedence as FromEnv: gorun, torchrun,
// Open MPI, Slurm), without checking the rest of the environment, reading
// a secret or waiting for anything. ok is false when no launcher variable
// holds a rank. It is for decisions taken before joining the job, such as
// letting only rank 0 print a usage error.
func RankFromEnv() (rank int, ok bool) {
	return rankFromEnv(envReader{os.LookupEnv})
}

func rankFromEnv(e envReader) (int, bool) {
	var name string
	switch {
	case e.has("GOCCL_RANK"):
		name = "GOCCL_RANK"
	case e.has("RANK") || e.has("WORLD_SIZE"):
		name = "RANK"
	case e.has("OMPI_COMM_WORLD_RANK"):
		name = "OMPI_COMM_WORLD_RANK"
	case e.has("SLURM_PROCID"):
		name = "SLURM_PROCID"
	default:
		return 0, false
	}
	v, _ := e.lookup(name)
	r, err := strconv.Atoi(v)
	if err != nil || r < 0 {
		return 0, false
	}
	return r, true
}
