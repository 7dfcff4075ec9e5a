package peers

import (
	"bufio"
	"bytes"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// Rows are one run's times: average microseconds per message size.
type Rows map[int]float64

// rankTag is gorun's prefix of a rank's line: "[3] ".
var rankTag = regexp.MustCompile(`^\[\d+\] ?`)

// ParseRows reads the rows of an OSU-style output: lines whose first two
// fields are a size in bytes (an integer) and a time in microseconds; gorun's
// rank tags are stripped first. Comments ('#'), blank lines and other text
// (warnings, gorun's messages) are skipped. A size seen twice keeps its first
// time. It also returns the transport named by a "# Transport: X" line of
// goccl's osu header, or "".
func ParseRows(out []byte) (rows Rows, transport string) {
	rows = Rows{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(rankTag.ReplaceAllString(sc.Text(), ""))
		if rest, ok := strings.CutPrefix(line, "# Transport:"); ok {
			if f := strings.Fields(rest); len(f) > 0 && transport == "" {
				transport = f[0]
			}
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		size, err := strconv.Atoi(f[0])
		if err != nil || size < 0 {
			continue
		}
		us, err := strconv.ParseFloat(f[1], 64)
		if err != nil || !(us >= 0) || math.IsInf(us, 1) {
			continue
		}
		if _, dup := rows[size]; !dup {
			rows[size] = us
		}
	}
	return rows, transport
}
