package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/goccl/goccl/collectives/simulate"
)

// config is a model as a file holds it (-params FILE) and as the fit of
// `collsim validate` writes it: the links, the CPU, the executor's
// settings and the machine's shape.
type config struct {
	Note       string        `json:"note,omitempty"`
	Local      simulate.Link `json:"local"`
	Net        simulate.Link `json:"net"`
	Gamma      float64       `json:"gamma"`
	Copy       float64       `json:"copy"`
	ChunkBytes int           `json:"chunk_bytes"`
	Slots      int           `json:"slots"`
	Inline     int           `json:"inline"`
	// CallOverhead: CPU seconds per rank per call besides its messages
	// (simulate.Params.CallOverhead).
	CallOverhead float64 `json:"call_overhead,omitempty"`
	// Oversub is what ranks sharing cores cost, by ranks per core.
	Oversub      []simulate.Oversub `json:"oversubscribed,omitempty"`
	RanksPerHost int                `json:"ranks_per_host"`
	Cores        int                `json:"cores"`      // per pool; 0: a core per rank
	PoolRanks    int                `json:"pool_ranks"` // 0: a pool per host
	// CreditWrites: credits that cannot ride with data cost a message's
	// CPU at both ends (simulate.Params.CreditWrites).
	CreditWrites bool `json:"credit_writes,omitempty"`
	// Coalesce: data messages to one peer posted in the same step share
	// one write and one read (simulate.Params.Coalesce).
	Coalesce bool `json:"coalesce,omitempty"`
	// OneThread: a rank's executor and transport are one thread
	// (simulate.Params.OneThread).
	OneThread bool `json:"one_thread,omitempty"`
	// Paced: calibrations and points are simulated as OSU's loop makes
	// them (osuSimulate); collsim validate -paced.
	Paced bool `json:"-"`
}

func (c *config) params() simulate.Params {
	p := simulate.DefaultParams(c.Local, c.Net, c.Gamma, c.Copy)
	if c.ChunkBytes > 0 {
		p.ChunkBytes = c.ChunkBytes
	}
	if c.Slots > 0 {
		p.Slots = c.Slots
	}
	p.Inline, p.Oversubscribed, p.CallOverhead = c.Inline, c.Oversub, c.CallOverhead
	p.CreditWrites, p.Coalesce, p.OneThread = c.CreditWrites, c.Coalesce, c.OneThread
	return p
}

func (c *config) machine(ranks int) simulate.Machine {
	return simulate.Machine{Ranks: ranks, RanksPerHost: c.RanksPerHost, Cores: c.Cores, PoolRanks: c.PoolRanks}
}

// presets are assumed machines for the tables, not measurements: their
// numbers are typical of the hardware named, stated here so that a reader
// can redo the tables with their own (-params FILE).
var presets = map[string]config{
	// A GPU-less HPC/AI cluster node: 8 ranks per host over shared memory,
	// a 100 Gbit/s RDMA NIC per host, zero-copy transports.
	"cluster": {
		Note:  "assumed: 8 ranks per host; shared memory within (1 us, 20 GB/s per rank); one 100 Gbit/s RDMA NIC per host (3 us); reduction 10 GB/s, copy 20 GB/s",
		Local: simulate.Link{Alpha: 1e-6, Beta: 1 / 20e9, Overhead: 0.3e-6},
		Net:   simulate.Link{Alpha: 3e-6, Beta: 1 / 12.5e9, Overhead: 0.5e-6},
		Gamma: 1 / 10e9, Copy: 1 / 20e9,
		ChunkBytes: 512 << 10, Slots: 8, Inline: 256, RanksPerHost: 8,
	},
	// The same hosts on 10 Gbit/s Ethernet with TCP: the CPU copies every
	// byte at both ends and pays a system call per message.
	"tcp": {
		Note:  "assumed: 8 ranks per host; TCP loopback within (15 us, 4 us per message, 0.2 ns/B copies); 10 Gbit/s TCP NIC per host (30 us, 5 us per message, 0.3 ns/B copies); reduction 10 GB/s, copy 20 GB/s",
		Local: simulate.Link{Alpha: 15e-6, Overhead: 4e-6, PerByte: 0.2e-9},
		Net:   simulate.Link{Alpha: 30e-6, Beta: 1 / 1.25e9, Overhead: 5e-6, PerByte: 0.3e-9},
		Gamma: 1 / 10e9, Copy: 1 / 20e9,
		ChunkBytes: 512 << 10, Slots: 8, Inline: 4096, RanksPerHost: 8,
	},
}

// loadConfig reads -params FILE, or the named preset.
func loadConfig(file, preset string) (config, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return config{}, err
		}
		var c config
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return config{}, fmt.Errorf("%s: %w", file, err)
		}
		return c, nil
	}
	c, ok := presets[preset]
	if !ok {
		return config{}, fmt.Errorf("unknown preset %q (have cluster, tcp)", preset)
	}
	return c, nil
}

// describe is the model in one paragraph, for the top of a report.
func (c *config) describe() string {
	var b strings.Builder
	if c.Note != "" {
		fmt.Fprintf(&b, "# %s\n", c.Note)
	}
	link := func(name string, l simulate.Link) {
		fmt.Fprintf(&b, "# %s: alpha %.2f us, port %s, overhead %.2f us/message", name, l.Alpha*1e6, rate(l.Beta), l.Overhead*1e6)
		if l.WriteTail > 0 {
			fmt.Fprintf(&b, " (a write's last %.2f after its message left)", l.WriteTail*1e6)
		}
		fmt.Fprintf(&b, ", CPU %.3f ns/B per end\n", l.PerByte*1e9)
	}
	link("local", c.Local)
	link("net  ", c.Net)
	fmt.Fprintf(&b, "# reduction %s, copy %s; chunk %s, %d slots, inline %d B; %d ranks per host",
		rate(c.Gamma), rate(c.Copy), sizeLabel(c.ChunkBytes), c.Slots, c.Inline, c.RanksPerHost)
	if c.Cores > 0 {
		pool := "host"
		if c.PoolRanks > 0 {
			pool = fmt.Sprintf("%d ranks", c.PoolRanks)
		}
		fmt.Fprintf(&b, "; %d cores per %s", c.Cores, pool)
		for _, o := range c.Oversub {
			fmt.Fprintf(&b, "; at %g ranks per core %.2f us more CPU per message end, %.2f us lost per task", o.RanksPerCore, o.Switch*1e6, o.Gap*1e6)
		}
	}
	b.WriteString("\n")
	return b.String()
}

func rate(secPerByte float64) string {
	if secPerByte <= 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%.2f GB/s", 1/secPerByte/1e9)
}

// sizeLabel prints a byte count the way OSU's tables are read: 8, 4K, 1M.
func sizeLabel(n int) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dG", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dK", n>>10)
	}
	return fmt.Sprint(n)
}

// algoShort abbreviates algorithm names for the crossover matrices.
var algoShort = map[string]string{
	"recursive-doubling": "rd", "rabenseifner": "rab", "ring": "ring", "tree": "tree",
	"binomial": "binom", "pipeline": "chain", "scatter-allgather": "s+ag",
	"pairwise": "pair", "bruck": "bruck",
}

func short(a string) string {
	if s, ok := algoShort[a]; ok {
		return s
	}
	return a
}
