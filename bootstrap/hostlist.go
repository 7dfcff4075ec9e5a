package bootstrap

import (
	"fmt"
	"strconv"
	"strings"
)

// maxHosts bounds the expansion of a Slurm host list.
const maxHosts = 1 << 20

// expandHostlist expands a Slurm host list such as "n[0-3,7],gpu[01-02]-a"
// into host names, keeping zero padding. Several bracket groups in one name
// expand as a cross product, as Slurm does.
func expandHostlist(s string) ([]string, error) {
	var out []string
	for _, item := range splitTopLevel(s) {
		if item == "" {
			return nil, fmt.Errorf("empty host name in %q", s)
		}
		hosts, err := expandItem(item, maxHosts-len(out))
		if err != nil {
			return nil, fmt.Errorf("host list %q: %w", s, err)
		}
		out = append(out, hosts...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty host list")
	}
	return out, nil
}

// splitTopLevel splits at commas outside brackets.
func splitTopLevel(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// expandItem expands one name with zero or more bracket groups, producing
// at most limit names.
func expandItem(item string, limit int) ([]string, error) {
	open := strings.IndexByte(item, '[')
	if open < 0 {
		if strings.ContainsAny(item, "]") {
			return nil, fmt.Errorf("unbalanced ']' in %q", item)
		}
		if limit < 1 {
			return nil, fmt.Errorf("more than %d hosts", maxHosts)
		}
		return []string{item}, nil
	}
	end := strings.IndexByte(item[open:], ']')
	if end < 0 {
		return nil, fmt.Errorf("unbalanced '[' in %q", item)
	}
	end += open
	prefix, body, rest := item[:open], item[open+1:end], item[end+1:]
	if strings.ContainsAny(prefix, "]") || strings.ContainsAny(body, "[") {
		return nil, fmt.Errorf("unbalanced brackets in %q", item)
	}
	var mids []string
	for _, r := range strings.Split(body, ",") {
		lo, hi, ok := strings.Cut(r, "-")
		if !ok {
			hi = lo
		}
		a, err1 := strconv.ParseUint(lo, 10, 32)
		b, err2 := strconv.ParseUint(hi, 10, 32)
		if lo == "" || hi == "" || err1 != nil || err2 != nil || a > b {
			return nil, fmt.Errorf("bad range %q in %q", r, item)
		}
		if b-a >= uint64(limit) || len(mids)+int(b-a) >= limit {
			return nil, fmt.Errorf("more than %d hosts", maxHosts)
		}
		width := len(lo)
		for v := a; v <= b; v++ {
			mids = append(mids, fmt.Sprintf("%0*d", width, v))
		}
	}
	tails, err := expandItem(rest, max(1, limit/len(mids)))
	if err != nil {
		return nil, err
	}
	if len(mids)*len(tails) > limit {
		return nil, fmt.Errorf("more than %d hosts", maxHosts)
	}
	out := make([]string, 0, len(mids)*len(tails))
	for _, m := range mids {
		for _, t := range tails {
			out = append(out, prefix+m+t)
		}
	}
	return out, nil
}

// parseTasksPerNode parses SLURM_TASKS_PER_NODE, e.g. "4" or "2(x3),1",
// into a task count per node.
func parseTasksPerNode(s string) ([]int, error) {
	var out []int
	for _, item := range strings.Split(s, ",") {
		count, rep := item, "1"
		if i := strings.IndexByte(item, '('); i >= 0 {
			if !strings.HasPrefix(item[i:], "(x") || !strings.HasSuffix(item, ")") {
				return nil, fmt.Errorf("bad item %q", item)
			}
			count, rep = item[:i], item[i+2:len(item)-1]
		}
		n, err1 := strconv.Atoi(count)
		r, err2 := strconv.Atoi(rep)
		if err1 != nil || err2 != nil || n < 1 || r < 1 || len(out)+r > maxHosts {
			return nil, fmt.Errorf("bad item %q", item)
		}
		for range r {
			out = append(out, n)
		}
	}
	return out, nil
}

// ExpandHostlist expands a Slurm host list such as "n[0-3,7],gpu[01-02]-a"
// into host names in order, keeping zero padding, as `scontrol show
// hostnames` does. Launchers use it to find the node of task 0.
func ExpandHostlist(s string) ([]string, error) { return expandHostlist(s) }
