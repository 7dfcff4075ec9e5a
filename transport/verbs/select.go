package verbs

// Device and GID selection: NCCL's IB_HCA syntax and the choice of the GID
// table entry.

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/verbs/internal/ibv"
)

func chooseGID(ctx ibv.Context, port int, pattr ibv.PortAttr, override int) (ibv.GIDEntry, error) {
	var entries []ibv.GIDEntry
	for i := 0; i < pattr.GIDTableLen; i++ {
		e, err := ctx.QueryGID(port, i)
		if err != nil {
			continue // unused entries may fail to query
		}
		entries = append(entries, e)
	}
	e, err := selectGID(pattr.LinkLayer, entries, override)
	if err != nil {
		return e, fmt.Errorf("%s:%d: %w", ctx.Name(), port, err)
	}
	return e, nil
}

// selectGID picks the GID table entry to use (see Config.GIDIndex).
func selectGID(linkLayer int, entries []ibv.GIDEntry, override int) (ibv.GIDEntry, error) {
	if override >= 0 {
		for _, e := range entries {
			if e.Index == override {
				if e.GID.IsZero() {
					return e, fmt.Errorf("GID index %d (GOCCL_IB_GID_INDEX) is unused", override)
				}
				return e, nil
			}
		}
		return ibv.GIDEntry{}, fmt.Errorf("GID index %d (GOCCL_IB_GID_INDEX) not in the GID table (%d entries)", override, len(entries))
	}
	if linkLayer != ibv.LinkLayerEthernet {
		for _, e := range entries {
			if e.Index == 0 {
				return e, nil
			}
		}
		return ibv.GIDEntry{}, errors.New("no GID at index 0")
	}
	pick := func(ok func(ibv.GIDEntry) bool) (ibv.GIDEntry, bool) {
		for _, e := range entries {
			if !e.GID.IsZero() && ok(e) {
				return e, true
			}
		}
		return ibv.GIDEntry{}, false
	}
	if e, ok := pick(func(e ibv.GIDEntry) bool {
		_, v4 := e.GID.IPv4()
		return e.Type == ibv.GIDTypeRoCEv2 && v4
	}); ok {
		return e, nil
	}
	if e, ok := pick(func(e ibv.GIDEntry) bool { return e.Type == ibv.GIDTypeRoCEv2 }); ok {
		return e, nil
	}
	if e, ok := pick(func(e ibv.GIDEntry) bool { return e.Type == ibv.GIDTypeRoCEv1 }); ok {
		return e, nil
	}
	return ibv.GIDEntry{}, errors.New("no usable RoCE GID (is an IP address configured on the netdev?)")
}

// hcaFilter is a parsed GOCCL_IB_HCA.
type hcaFilter struct {
	exclude bool
	exact   bool
	entries []hcaEntry
}

type hcaEntry struct {
	name string
	port int // 0: any
}

// parseHCA parses NCCL's IB_HCA syntax (see Config.HCA).
func parseHCA(s string) (hcaFilter, error) {
	var f hcaFilter
	s = strings.TrimSpace(s)
	for len(s) > 0 && (s[0] == '^' || s[0] == '=') {
		if s[0] == '^' {
			f.exclude = true
		} else {
			f.exact = true
		}
		s = s[1:]
	}
	if s == "" {
		return f, nil
	}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		e := hcaEntry{name: item}
		if i := strings.LastIndexByte(item, ':'); i >= 0 {
			p, err := strconv.Atoi(item[i+1:])
			if err != nil || p <= 0 || p > 255 || i == 0 {
				return f, fmt.Errorf("verbs: GOCCL_IB_HCA entry %q: want name[:port]: %w", item, transport.ErrInvalid)
			}
			e.name, e.port = item[:i], p
		}
		f.entries = append(f.entries, e)
	}
	return f, nil
}

func (f hcaFilter) match(e hcaEntry, name string) bool {
	if f.exact {
		return e.name == name
	}
	return strings.HasPrefix(name, e.name)
}

// device reports whether any port of name may be selected.
func (f hcaFilter) device(name string) bool {
	if len(f.entries) == 0 {
		return true
	}
	for _, e := range f.entries {
		if f.match(e, name) {
			// An exclusion of one port leaves the others.
			return !f.exclude || e.port != 0
		}
	}
	return f.exclude
}

// port reports whether port of name may be selected.
func (f hcaFilter) port(name string, port int) bool {
	if len(f.entries) == 0 {
		return true
	}
	for _, e := range f.entries {
		if f.match(e, name) && (e.port == 0 || e.port == port) {
			return !f.exclude
		}
	}
	return f.exclude
}
