package bootstrap

import (
	"strconv"
	"strings"
)

// Blame is a failed rank's conclusion, for the launcher that hosts the
// store: the world rank it found at the root of its failure and why, in a
// few words. A rank publishes its first under BlameKey(its world rank);
// gorun reads them when a job fails, so that its summary names the rank
// the others failed for (a rank that exited with a status a moment after
// the survivors did, or one that was stopped or hung and never exited by
// itself) rather than the first process that exited.
type Blame struct {
	Root   int    // world rank at the root of the failure
	Reason string // one line, e.g. "stalled (stopped, hung, or not in the call)"
}

const blamePrefix = "goccl/blame/"

// BlameKey is the store key of world rank r's Blame.
func BlameKey(r int) string { return blamePrefix + strconv.Itoa(r) }

// Encode is b as a store value: the root's number, a newline, the reason.
func (b Blame) Encode() []byte {
	return []byte(strconv.Itoa(b.Root) + "\n" + strings.ReplaceAll(b.Reason, "\n", " "))
}

// DecodeBlame reads a value Encode made; false for anything else (the
// store is shared with the ranks' programs: a value is not trusted).
func DecodeBlame(v []byte) (Blame, bool) {
	num, reason, ok := strings.Cut(string(v), "\n")
	if !ok || len(reason) > 512 || strings.Contains(reason, "\n") {
		return Blame{}, false
	}
	root, err := strconv.Atoi(num)
	if err != nil || root < 0 {
		return Blame{}, false
	}
	return Blame{Root: root, Reason: reason}, true
}

// Blames are the Blames of world ranks 0..size-1 that the store holds,
// by the rank that published each.
func (s *Server) Blames(size int) map[int]Blame {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[int]Blame{}
	for r := range size {
		if v, ok := s.data[BlameKey(r)]; ok {
			if b, ok := DecodeBlame(v); ok && b.Root < size {
				out[r] = b
			}
		}
	}
	return out
}
