package comm

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
)

// misspelled returns the variables of env (os.Environ's form) named
// GOCCL_* (in any case) that goccl does not read but that are, in
// capitals, within two edits (a letter added, dropped or changed, or two
// swapped) of one it does, each with the name meant: GOCCL_TRASNPORT=tcp
// would otherwise be ignored without a word. Names further from every
// variable (a script's own GOCCL_VM_MEM) are not goccl's business.
func misspelled(env []string) [][2]string {
	var out [][2]string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		upper := strings.ToUpper(name)
		if !strings.HasPrefix(upper, "GOCCL_") || known(name) {
			continue
		}
		best, dist := "", 3
		for i := range envVars {
			if d := editDistance(upper, envVars[i].Name); d < dist {
				best, dist = envVars[i].Name, d
			}
		}
		if best != "" {
			out = append(out, [2]string{name, best})
		}
	}
	return out
}

// known reports whether goccl reads the variable name.
func known(name string) bool {
	for i := range envVars {
		if envVars[i].Name == name {
			return true
		}
	}
	return false
}

// editDistance is the optimal string alignment distance between a and b:
// insertions, deletions, substitutions and swaps of neighbours.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// warnMisspelledOnce makes warnMisspelled log once per process.
var warnMisspelledOnce sync.Once

// warnMisspelled logs each misspelled variable of env (see misspelled);
// rank 0 alone calls it.
func warnMisspelled(l *slog.Logger, env []string) {
	warnMisspelledOnce.Do(func() {
		for _, m := range misspelled(env) {
			l.Warn(fmt.Sprintf("goccl: rank 0: %s is not a goccl variable and is ignored: did you mean %s?", m[0], m[1]))
		}
	})
}
