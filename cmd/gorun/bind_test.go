package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/internal/affinity"
)

func TestCPUList(t *testing.T) {
	require.Equal(t, "0-3,6,8-9", cpuList([]int{9, 0, 1, 2, 3, 6, 8}))
}

// Ranks started by gorun run on the CPUs --bind-to gives them, and their
// Go runtime sizes GOMAXPROCS to match.
func TestBindTo(t *testing.T) {
	all, err := affinity.Usable()
	require.NoError(t, err)
	if len(all) < 2 {
		t.Skipf("SKIP: binding 2 ranks needs 2 CPUs; this process may use %d", len(all))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	per := len(all) / 2
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{args: []string{"-n", "2"}, want: []string{
			fmt.Sprintf("[0] cpus %s gomaxprocs %d", cpuList(all[:per]), per),
			fmt.Sprintf("[1] cpus %s gomaxprocs %d", cpuList(all[per:2*per]), per)}},
		{args: []string{"-n", "2", "--bind-to", "none"}, want: []string{
			fmt.Sprintf("[0] cpus %s gomaxprocs %d", cpuList(all), len(all)),
			fmt.Sprintf("[1] cpus %s gomaxprocs %d", cpuList(all), len(all))}},
		{args: []string{"-n", "2", "--oversubscribe", "-H", fmt.Sprintf("localhost:%d", 2)}, want: []string{
			fmt.Sprintf("[0] cpus %s gomaxprocs %d", cpuList(all[:per]), per),
			fmt.Sprintf("[1] cpus %s gomaxprocs %d", cpuList(all[per:2*per]), per)}},
	} {
		code, stdout, stderr, _ := gorun(t, ctx, "affinity", tc.args...)
		require.Equal(t, 0, code, "gorun %v: %s", tc.args, stderr)
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		require.ElementsMatch(t, tc.want, lines, "gorun %v", tc.args)
	}
	// More ranks than CPUs: auto binds each to one CPU, round robin
	// (GOMAXPROCS 1 unless the user set it), core refuses.
	n := fmt.Sprint(len(all) + 1)
	var want []string
	for r := range len(all) + 1 {
		want = append(want, fmt.Sprintf("[%d] cpus %d gomaxprocs 1", r, all[r%len(all)]))
	}
	code, stdout, stderr, _ := gorun(t, ctx, "affinity", "-n", n)
	require.Equal(t, 0, code, stderr)
	require.ElementsMatch(t, want, strings.Split(strings.TrimSpace(stdout), "\n"))
	t.Setenv("GOMAXPROCS", "3") // the user's choice is kept
	code, stdout, stderr, _ = gorun(t, ctx, "affinity", "-n", n)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, fmt.Sprintf("[0] cpus %d gomaxprocs 3", all[0]))
	os.Unsetenv("GOMAXPROCS")
	code, _, stderr, _ = gorun(t, ctx, "affinity", "-n", n, "--bind-to", "core")
	require.NotEqual(t, 0, code)
	require.Contains(t, stderr, "--bind-to core: "+n+" ranks on this host")
	code, _, stderr, _ = gorun(t, ctx, "affinity", "-n", "1", "--bind-to", "socket")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `--bind-to "socket": want auto, core or none`)
}
