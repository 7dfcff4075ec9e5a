package comm

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/bootstrap"
	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/logtest"
)

// TestEnvironmentDefaults: the defaults the environment table documents
// are the ones fill applies.
func TestEnvironmentDefaults(t *testing.T) {
	var filled Options
	require.NoError(t, filled.fill())
	for _, e := range envVars {
		switch {
		case e.set == nil || e.Default == "":
			continue
		case e.defaultBy != "":
			t.Logf("%s: default %s applied by %s, not comm", e.Name, e.Default, e.defaultBy)
			continue
		}
		var want Options
		require.NoError(t, e.set(&want, e.Default), "%s's default %q", e.Name, e.Default)
		require.True(t, e.same(&want, &filled), "%s: the table says %s, fill applies another", e.Name, e.Default)
	}
}

// singleRank skips a test of Init unless this process runs without a
// launcher (Init then makes a communicator of one rank).
func singleRank(t *testing.T) {
	if _, err := bootstrap.FromEnv(); !errors.Is(err, bootstrap.ErrNoLauncher) {
		t.Skipf("the test process runs under a launcher (%v): Init would join its job", err)
	}
}

// TestInitExplicitOptionsWin: Init reads the environment for the fields
// its Options leave zero only; a set field wins over a conflicting
// variable, which is then not even parsed.
func TestInitExplicitOptionsWin(t *testing.T) {
	singleRank(t)
	for k, v := range map[string]string{
		"GOCCL_TRANSPORT":  "verbs", // would fail here without a device
		"GOCCL_ALGO":       "allreduce:ring",
		"GOCCL_CHUNK_SIZE": "8192",
		"GOCCL_SLOTS":      "abc", // malformed, but overridden
		"GOCCL_TIMEOUT":    "1s",
		"GOCCL_SIMD":       "avx3",
	} {
		t.Setenv(k, v)
	}
	var rec logtest.Recorder
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Init(ctx, Options{Transport: "shm", Algorithms: "allreduce:tree", ChunkSize: 4096, Slots: 3,
		Timeout: 2 * time.Minute, SIMD: collectives.SIMD(), Logger: rec.Logger()})
	require.NoError(t, err)
	defer c.Close()
	require.Equal(t, "shm", c.Transport())
	require.Equal(t, 4096, c.opts.ChunkSize)
	require.Equal(t, 3, c.opts.Slots)
	require.Equal(t, 2*time.Minute, c.opts.Timeout)
	algo, err := c.Algorithm("allreduce", TypeFloat32, 1<<20)
	require.NoError(t, err)
	require.Equal(t, "tree", algo)
	require.Equal(t, 1, rec.Count("INFO goccl: rank 0: transports shm (Options.Transport=shm; no launcher in the environment (gorun, torchrun, Open MPI, Slurm): a job of one rank)"), "log:\n%s", rec.String())
}

// TestInitReadsEnvironment: the fields Init's Options leave zero take the
// environment's values, and a malformed variable fails Init naming it.
func TestInitReadsEnvironment(t *testing.T) {
	singleRank(t)
	t.Setenv("GOCCL_TRANSPORT", "tcp")
	t.Setenv("GOCCL_CHUNK_SIZE", "8192")
	t.Setenv("GOCCL_ALGO", "allreduce:ring")
	var rec logtest.Recorder
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Init(ctx, Options{Logger: rec.Logger()})
	require.NoError(t, err)
	require.Equal(t, "tcp", c.Transport())
	require.Equal(t, 8192, c.opts.ChunkSize)
	algo, err := c.Algorithm("allreduce", TypeFloat32, 1<<20)
	require.NoError(t, err)
	require.Equal(t, "ring", algo)
	require.Equal(t, 1, rec.Count("INFO goccl: rank 0: transports tcp (GOCCL_TRANSPORT=tcp; no launcher in the environment (gorun, torchrun, Open MPI, Slurm): a job of one rank)"), "log:\n%s", rec.String())
	require.NoError(t, c.Close())

	t.Setenv("GOCCL_SLOTS", "abc")
	_, err = Init(ctx, Options{Logger: rec.Logger()})
	require.ErrorContains(t, err, `GOCCL_SLOTS="abc": want a positive integer`)
}

// TestAgreedSettingsDocumented: the README's list of the settings every
// rank must set alike is the table's (mustAgree).
func TestAgreedSettingsDocumented(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, para, ok := strings.Cut(string(b), "Every rank of a job must set ")
	if !ok {
		t.Fatal("README: no paragraph on the settings every rank must set alike")
	}
	para, _, _ = strings.Cut(para, "alike")
	var want []string
	for _, v := range envVars {
		if v.agree {
			want = append(want, v.Name)
		}
	}
	var got []string
	for _, f := range strings.Split(para, "`") {
		if strings.HasPrefix(f, "GOCCL_") {
			got = append(got, f)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("README lists %v, the table marks %v", got, want)
	}
}
