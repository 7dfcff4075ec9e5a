package comm

import "github.com/goccl/goccl/collectives"

// StagingBytes is the staging memory c holds now (its links' slots).
func StagingBytes(c *Comm) int64 { return c.stagingBytes.Load() }

// LinkStagingBytes is the staging memory of one link of c.
func LinkStagingBytes(c *Comm) int64 { return int64(c.opts.Slots) * int64(c.opts.ChunkSize) }

// CostModel is c's cost model: α, β and γ, and the local links' α and β
// (zero on one host).
func CostModel(c *Comm) (alpha, beta, gamma, localAlpha, localBeta float64) {
	l := c.linkCost[collectives.LinkLocal]
	if c.nHosts <= 1 {
		l = collectives.LinkCost{}
	}
	return c.alpha, c.beta, c.gamma, l.Alpha, l.Beta
}

// RabenseifnerBeta is the β fitted at New to Rabenseifner's allreduce (0
// where it was not measured).
func RabenseifnerBeta(c *Comm) float64 { return c.algoBeta[collAllreduce]["rabenseifner"] }
