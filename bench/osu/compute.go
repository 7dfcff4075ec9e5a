package osu

import (
	"time"

	"github.com/goccl/goccl/comm"
)

// The dummy compute of OSU's non-blocking tests (osu_util_mpi.c:
// compute_on_host, do_compute_cpu, do_compute_and_probe): a 25x25 float
// kernel repeated until the target time has passed.
const dim = 25

// kernel is the compute's state; each rank has its own.
type kernel struct {
	a    [dim][dim]float32
	x, y [dim]float32
	init bool
}

func (k *kernel) computeOnHost() {
	if !k.init {
		for i := range dim {
			k.x[i], k.y[i] = 1, 1
			for j := range dim {
				k.a[i][j] = 2
			}
		}
		k.init = true
	}
	for i := range dim {
		for j := range dim {
			k.x[i] = k.x[i] + k.a[i][j]*k.a[j][i] + k.y[j]
		}
	}
}

func (k *kernel) computeFor(target time.Duration) {
	var elapsed time.Duration
	for elapsed < target {
		t := time.Now()
		k.computeOnHost()
		elapsed += time.Since(t)
	}
}

// dummyCompute computes for target; with probes > 0 it splits the compute
// into that many parts and tests req after each. It returns the time spent
// in Test.
func (k *kernel) dummyCompute(target time.Duration, req *comm.Request, probes int) (time.Duration, error) {
	if probes <= 0 {
		k.computeFor(target)
		return 0, nil
	}
	var testTime time.Duration
	per := target / time.Duration(probes)
	for range probes {
		k.computeFor(per)
		t := time.Now()
		if _, err := req.Test(); err != nil {
			return testTime, err
		}
		testTime += time.Since(t)
	}
	return testTime, nil
}
