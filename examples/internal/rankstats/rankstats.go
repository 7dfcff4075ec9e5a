// Package rankstats reports what one rank of a job holds, for the scale
// runs of the examples (-stats): its resident memory, peak, address space
// and open descriptors (from /proc/self, Linux), the time Init took and the
// peers it connected.
package rankstats

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"time"
)

// Line is one rank's stats line, e.g. "stats: rank 3: init 1.2s, peers 3
// (peak 18), VmRSS 41 MiB, VmHWM 45 MiB, VmSize 1204 MiB, fds 17": the
// peers connected at the end and the most at once. Fields that /proc
// does not give (not Linux) are left out.
func Line(rank int, init time.Duration, peers, peak int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "stats: rank %d: init %v, peers %d (peak %d)", rank, init.Round(time.Millisecond), peers, peak)
	if f, err := os.Open("/proc/self/status"); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			k, v, ok := strings.Cut(s.Text(), ":")
			if !ok || (k != "VmRSS" && k != "VmHWM" && k != "VmSize") {
				continue
			}
			var kb int
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err == nil {
				fmt.Fprintf(&b, ", %s %d MiB", k, kb>>10)
			}
		}
		f.Close()
	}
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		fmt.Fprintf(&b, ", fds %d", len(fds)-1) // less the one reading the directory
	}
	return b.String()
}
