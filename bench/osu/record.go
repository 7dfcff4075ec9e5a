package osu

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
)

// Record is one row of -o json: the measurement and the run it belongs to,
// so that rows from several runs can be mixed and still be told apart.
type Record struct {
	Benchmark string `json:"benchmark"`
	Layout    string `json:"layout"` // "osu" or "nccl"
	// Timing: "back-to-back" for --back-to-back (calls timed together),
	// empty for OSU's (each call alone, a barrier after it).
	Timing  string `json:"timing,omitempty"`
	Size    int    `json:"size"`  // bytes, as the text layout prints it
	Count   int    `json:"count"` // elements
	Type    string `json:"type"`
	Op      string `json:"op,omitempty"`
	Root    int    `json:"root"`
	InPlace bool   `json:"in_place,omitempty"`

	AvgUs      float64 `json:"avg_us,omitempty"`
	MinUs      float64 `json:"min_us,omitempty"`
	MaxUs      float64 `json:"max_us,omitempty"`
	Iterations int     `json:"iterations"`
	MBps       float64 `json:"bandwidth_MBps,omitempty"` // bw, bibw
	AlgBW      float64 `json:"algbw_GBps"`
	BusBW      float64 `json:"busbw_GBps"`

	// Non-blocking tests.
	OverallUs  float64 `json:"overall_us,omitempty"`
	ComputeUs  float64 `json:"compute_us,omitempty"`
	CommUs     float64 `json:"pure_comm_us,omitempty"`
	OverlapPct float64 `json:"overlap_pct,omitempty"`

	Validated bool  `json:"validated"`
	Wrong     int64 `json:"wrong"`

	Transport string   `json:"transport"`
	Algorithm string   `json:"algorithm"`
	Ranks     int      `json:"ranks"`
	Hosts     int      `json:"hosts"`
	HostNames []string `json:"host_names,omitempty"`
	Version   string   `json:"goccl_version"`
	GoVersion string   `json:"go_version"`
	Date      string   `json:"date"`
}

func (r *Record) setMeta(m Meta) {
	r.Transport, r.Algorithm, r.Ranks, r.Hosts = m.Transport, m.Algorithm, m.Ranks, m.Hosts
	r.HostNames, r.Version, r.GoVersion, r.Date = m.HostNames, m.Version, m.GoVersion, m.Date
}

func writeRecord(w io.Writer, r Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// ReadRecords reads the rows of one -o json output (one object per line;
// blank lines and lines starting with '#' are skipped). A line may start
// with gorun's rank tag ("[0] "), so that the output of
// "gorun -n 2 osu allreduce -o json > run.json" reads as it is.
func ReadRecords(r io.Reader) ([]Record, error) {
	var out []Record
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<24)
	line := 0
	for sc.Scan() {
		line++
		b := stripRankTag(sc.Bytes())
		if len(b) == 0 || b[0] == '#' {
			continue
		}
		var rec Record
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		out = append(out, rec)
	}
	return out, sc.Err()
}

// stripRankTag removes gorun's "[N] " (or "[N]" on an empty line) from the
// start of b.
func stripRankTag(b []byte) []byte {
	if len(b) < 3 || b[0] != '[' {
		return b
	}
	i := 1
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	if i == 1 || i >= len(b) || b[i] != ']' {
		return b
	}
	b = b[i+1:]
	if len(b) > 0 && b[0] == ' ' {
		b = b[1:]
	}
	return b
}
