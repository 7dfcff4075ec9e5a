package bootstrap

import "testing"

// RankFromEnv agrees with FromEnv on every launcher's environment,
// including the precedence between launchers.
func TestRankFromEnv(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
	}{
		{"gorun", gorunBase},
		{"gorun wins over torchrun", with(gorunBase, "RANK=7", "WORLD_SIZE=9")},
		{"torchrun", torchBase},
		{"ompi", ompiBase},
		{"ompi inside slurm", with(ompiBase, "SLURM_PROCID=0", "SLURM_NTASKS=1")},
		{"slurm", slurmBase},
	} {
		info, err := fromEnv(mapLookup(c.env))
		if err != nil {
			t.Fatalf("%s: FromEnv: %v", c.name, err)
		}
		r, ok := rankFromEnv(envReader{mapLookup(c.env)})
		if !ok || r != info.Rank {
			t.Errorf("%s: RankFromEnv = %d, %v; FromEnv says rank %d", c.name, r, ok, info.Rank)
		}
	}
	for _, env := range []map[string]string{{}, {"GOCCL_RANK": "x"}, {"RANK": "-1"}, {"WORLD_SIZE": "4"}} {
		if r, ok := rankFromEnv(envReader{mapLookup(env)}); ok {
			t.Errorf("%v: RankFromEnv = %d, true; want no rank", env, r)
		}
	}
}
