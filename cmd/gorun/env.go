package main

import (
	"fmt"
	"strconv"
	"strings"
)

// launcherNames are the variables gorun sets for each rank; inherited
// values of these (and of other launchers' rank variables, which would
// confuse bootstrap) never reach a rank.
var launcherNames = []string{
	"GOCCL_RANK", "GOCCL_SIZE", "GOCCL_LOCAL_RANK", "GOCCL_LOCAL_SIZE", "GOCCL_BOOTSTRAP", "GOCCL_SECRET",
	"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
	"GROUP_RANK", "ROLE_RANK", "TORCHELASTIC_USE_AGENT_STORE",
	"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
}

// kv is one environment variable.
type kv struct{ k, v string }

// parseExport parses -x: "VAR=value" sets VAR, "VAR" passes gorun's own
// value (an error when gorun has none).
func parseExport(s string, lookup func(string) (string, bool)) (kv, error) {
	k, v, hasValue := strings.Cut(s, "=")
	if !validName(k) {
		return kv{}, fmt.Errorf("-x %q: %q is not a variable name", s, k)
	}
	if !hasValue {
		var ok bool
		if v, ok = lookup(k); !ok {
			return kv{}, fmt.Errorf("-x %s: %s is not set in gorun's environment", s, k)
		}
	}
	if strings.ContainsAny(v, "\n\x00") {
		return kv{}, fmt.Errorf("-x %s: the value holds a newline or NUL", k)
	}
	return kv{k, v}, nil
}

func validName(k string) bool {
	if k == "" || (k[0] >= '0' && k[0] <= '9') {
		return false
	}
	for _, c := range k {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// rankVars are the launcher variables of one rank.
func rankVars(p placement, n int, store, secretHex, masterAddr string, masterPort int) []kv {
	r, lr, ls := strconv.Itoa(p.rank), strconv.Itoa(p.localRank), strconv.Itoa(p.localSize)
	size := strconv.Itoa(n)
	return []kv{
		{"GOCCL_RANK", r}, {"GOCCL_SIZE", size},
		{"GOCCL_LOCAL_RANK", lr}, {"GOCCL_LOCAL_SIZE", ls},
		{"GOCCL_BOOTSTRAP", store}, {"GOCCL_SECRET", secretHex},
		{"RANK", r}, {"WORLD_SIZE", size},
		{"LOCAL_RANK", lr}, {"LOCAL_WORLD_SIZE", ls},
		{"MASTER_ADDR", masterAddr}, {"MASTER_PORT", strconv.Itoa(masterPort)},
	}
}

// mergeEnv is base without any launcher variable, with extra (-x) and then
// vars set; later entries win.
func mergeEnv(base []string, extra, vars []kv) []string {
	drop := make(map[string]bool, len(launcherNames)+len(extra))
	for _, k := range launcherNames {
		drop[k] = true
	}
	for _, e := range extra {
		drop[e.k] = true
	}
	for _, e := range vars {
		drop[e.k] = true
	}
	env := make([]string, 0, len(base)+len(extra)+len(vars))
	for _, e := range base {
		k, _, _ := strings.Cut(e, "=")
		if !drop[k] {
			env = append(env, e)
		}
	}
	seen := map[string]int{}
	for _, list := range [][]kv{extra, vars} {
		for _, e := range list {
			if i, ok := seen[e.k]; ok {
				env[i] = e.k + "=" + e.v
				continue
			}
			seen[e.k] = len(env)
			env = append(env, e.k+"="+e.v)
		}
	}
	return env
}

// remoteEnv is what a rank on another host gets: gorun's own GOCCL_*
// settings (GOCCL_TRANSPORT, ...), the -x variables and its launcher
// variables. Nothing else of gorun's environment travels.
func remoteEnv(base []string, extra, vars []kv) []kv {
	var out []kv
	launcher := map[string]bool{}
	for _, k := range launcherNames {
		launcher[k] = true
	}
	for _, e := range base {
		k, v, _ := strings.Cut(e, "=")
		if strings.HasPrefix(k, "GOCCL_") && !launcher[k] && validName(k) && !strings.ContainsAny(v, "\n\x00") {
			out = append(out, kv{k, v})
		}
	}
	out = append(out, extra...)
	return append(out, vars...)
}
