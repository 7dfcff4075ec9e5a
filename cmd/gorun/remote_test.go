package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeSSH is an ssh stand-in that runs the remote command on this machine
// with an empty environment, as sshd would start it, behind a relay
// process ("the link") that copies its standard input, so that a test can
// cut the link by killing the relay. It prints "link PID" on stderr.
const fakeSSH = `#!/bin/sh
while [ "$1" != "--" ]; do shift; done
shift 2
d=$(mktemp -d)
mkfifo "$d/in"
exec 3<&0
cat <&3 >"$d/in" &
echo "link $!" >&2
exec 3<&-
env -i PATH="$PATH" HOME="$HOME" sh -c "$1" <"$d/in"
s=$?
rm -rf "$d"
exit $s
`

func writeFakeSSH(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fakessh")
	if err := os.WriteFile(path, []byte(fakeSSH), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// Ranks on "remote" hosts (fake ssh) get their environment through the
// wrapper, run in gorun's working directory and meet through the store.
func TestRemoteRanks(t *testing.T) {
	ssh := writeFakeSSH(t)
	t.Setenv("GOCCL_TEST_FORWARDED", "yes")
	t.Setenv("GORUN_TEST_NOT_FORWARDED", "no")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, mode := range []string{"env", "bootstrap"} {
		code, stdout, stderr, _ := gorun(t, ctx, mode, "--ssh", ssh, "-H", "hostA:2,hostB,localhost",
			"--bootstrap-addr", "127.0.0.1", "-x", "GORUN_TEST_CHILD", "-x", "GORUN_TEST_INHERITED=set by -x")
		if code != 0 {
			t.Fatalf("%s: exit %d; stderr:\n%s", mode, code, stderr)
		}
		if mode == "bootstrap" {
			for r := range 4 {
				if want := fmt.Sprintf("[%d] source=gorun allgather=0,10,20,30\n", r); !strings.Contains(stdout, want) {
					t.Errorf("missing %q in:\n%s", want, stdout)
				}
			}
			continue
		}
		env := map[string]string{}
		for _, m := range regexp.MustCompile(`(?m)^\[(\d)\] env (\w+)=(.*)$`).FindAllStringSubmatch(stdout, -1) {
			env[m[1]+" "+m[2]] = m[3]
		}
		for k, want := range map[string]string{
			"0 LOCAL_RANK": "0", "1 LOCAL_RANK": "1", "2 LOCAL_RANK": "0", "3 LOCAL_RANK": "0",
			"0 LOCAL_WORLD_SIZE": "2", "2 LOCAL_WORLD_SIZE": "1", "3 WORLD_SIZE": "4", "1 GOCCL_RANK": "1",
			"0 MASTER_ADDR": "hostA", "3 MASTER_ADDR": "hostA", "1 GORUN_TEST_INHERITED": "set by -x",
			"3 GORUN_TEST_INHERITED": "set by -x",
			// Ranks started over ssh bind themselves (comm.Init); gorun
			// binds the local one before it runs, and tells it not to.
			"0 GOCCL_BIND": "auto", "2 GOCCL_BIND": "auto", "3 GOCCL_BIND": "none",
		} {
			if env[k] != want {
				t.Errorf("%s=%q, want %q", k, env[k], want)
			}
		}
		if !strings.HasPrefix(env["1 GOCCL_BOOTSTRAP"], "127.0.0.1:") || env["1 GOCCL_BOOTSTRAP"] != env["3 GOCCL_BOOTSTRAP"] {
			t.Errorf("GOCCL_BOOTSTRAP %q (remote) %q (local)", env["1 GOCCL_BOOTSTRAP"], env["3 GOCCL_BOOTSTRAP"])
		}
		if len(env["2 GOCCL_SECRET"]) != 64 {
			t.Errorf("GOCCL_SECRET=%q", env["2 GOCCL_SECRET"])
		}
		if strings.Contains(stdout+stderr, env["2 GOCCL_SECRET"]+" ") {
			t.Errorf("secret shown outside the env line")
		}
	}
}

// Cutting a remote rank's ssh link stops the rank on the remote side (with
// SIGKILL after the grace period: the rank ignores SIGTERM); gorun names the
// rank and stops the others.
func TestRemoteLinkDrop(t *testing.T) {
	ssh := writeFakeSSH(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Setenv("GORUN_TEST_CHILD", "hang")
	var o, e syncBuffer
	done := make(chan int, 1)
	dir := t.TempDir()
	t.Chdir(dir)
	go func() {
		done <- run(ctx, []string{"--ssh", ssh, "-H", "localhost,hostB,hostC", "--grace", "1s",
			"--bootstrap-addr", "127.0.0.1", "-x", "GORUN_TEST_CHILD", os.Args[0]}, &o, &e)
	}()
	pids := map[string]int{}
	deadline := time.Now().Add(20 * time.Second)
	for len(pids) < 5 { // 3 ranks, 2 links
		if time.Now().After(deadline) {
			t.Fatalf("ranks not up; stdout:\n%s\nstderr:\n%s", o.String(), e.String())
		}
		time.Sleep(20 * time.Millisecond)
		for _, m := range regexp.MustCompile(`(?m)^\[(\d)\] (pid|link) (\d+)`).FindAllStringSubmatch(o.String()+e.String(), -1) {
			pids[m[2]+m[1]], _ = strconv.Atoi(m[3])
		}
	}
	if !strings.Contains(o.String(), "[1] pid "+strconv.Itoa(pids["pid1"])+" wd "+dir) {
		t.Errorf("remote rank not in gorun's directory %s; stdout:\n%s", dir, o.String())
	}
	cut := time.Now()
	syscall.Kill(pids["link2"], syscall.SIGKILL)
	var code int
	select {
	case code = <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("gorun still running 10 s after the link was cut; stderr:\n%s", e.String())
	}
	t.Logf("gorun exited %v after the link of rank 2 was cut", time.Since(cut))
	if code == 0 {
		t.Errorf("exit 0 after a rank lost its link")
	}
	if !regexp.MustCompile(`(?m)^gorun: rank 2 on hostC \(ssh pid \d+\) .*$`).MatchString(e.String()) {
		t.Errorf("no summary naming rank 2 on hostC; stderr:\n%s", e.String())
	}
	for _, k := range []string{"pid0", "pid1", "pid2"} {
		for !time.Now().After(cut.Add(5*time.Second)) && alive(pids[k]) {
			time.Sleep(20 * time.Millisecond)
		}
		if alive(pids[k]) {
			syscall.Kill(pids[k], syscall.SIGKILL)
			t.Errorf("rank process %s (%d) left behind", k, pids[k])
		}
	}
}

// --timeout stops the job, exits 124 and names the ranks still running.
func TestTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, _, stderr, took := gorun(t, ctx, "oneexits", "-n", "3", "--timeout", "2s", "--grace", "1s")
	if code != exitTimeout {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitTimeout, stderr)
	}
	if !regexp.MustCompile(`(?m)^gorun: timed out after 2s; ranks still running: 1 on \S+, 2 on \S+\n\z`).MatchString(stderr) {
		t.Errorf("stderr:\n%s", stderr)
	}
	if took > 5*time.Second {
		t.Errorf("took %v", took)
	}
}

// --output-dir writes one file per rank, untagged; --timestamp adds the
// time after the tag.
func TestOutputDirAndTimestamp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "logs")
	code, stdout, stderr, _ := gorun(t, ctx, "hello", "-n", "2", "--output-dir", dir, "--timestamp")
	if code != 0 || stdout != "" || stderr != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	ts := `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z `
	for r := range 2 {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank-%d.log", r)))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"hello from", "err from"} {
			if !regexp.MustCompile(`(?m)^` + ts + want + " " + strconv.Itoa(r) + `$`).Match(b) {
				t.Errorf("rank-%d.log lacks %q with a timestamp:\n%s", r, want, b)
			}
		}
	}
	code, stdout, _, _ = gorun(t, ctx, "hello", "-n", "1", "--timestamp")
	if code != 0 || !regexp.MustCompile(`^\[0\] `+ts+`hello from 0\n$`).MatchString(stdout) {
		t.Errorf("exit %d, stdout %q", code, stdout)
	}
}

// fakeMuxSSH is an ssh stand-in for connection sharing: a shared
// connection (ControlMaster=yes) has its control socket (a plain file here)
// while it lives, and removes it when it ends: with -N (no command) when it
// is told to end, else when its command ends, as ssh does. One that rides
// on it (ControlMaster=no) looks for the socket a moment after it started,
// as ssh does once it has run, and fails as a refused handshake would if
// it is not there.
const fakeMuxSSH = `#!/bin/sh
master= socket= nocmd=
while [ "$1" != "--" ]; do
	case "$1" in
	ControlMaster=yes) master=1 ;;
	ControlPath=*) socket=${1#ControlPath=} ;;
	-N) nocmd=1 ;;
	esac
	shift
done
shift 2
if [ -n "$master" ]; then
	: >"$socket"
	trap 'rm -f "$socket"; exit 0' TERM INT
	if [ -n "$nocmd" ]; then
		while :; do sleep 0.05; done
	fi
	env -i PATH="$PATH" HOME="$HOME" sh -c "$1"
	s=$?
	rm -f "$socket"
	exit $s
fi
if [ -n "$socket" ]; then
	sleep 0.3
	[ -e "$socket" ] || { echo "kex_exchange_identification: no control socket $socket" >&2; exit 255; }
fi
exec env -i PATH="$PATH" HOME="$HOME" sh -c "$1"
`

// The ranks that share a host's ssh connection find it however late their
// ssh gets to it and however soon the other ranks end. Regressions: gorun
// removed the sockets as soon as it had started the ranks; and the
// connection was the first rank's ssh, gone when that rank ended (here at
// once), before the others had attached. Those that found no connection
// opened their own, which sshd drops beyond MaxStartups.
func TestSharedSSHConnectionOutlivesRanks(t *testing.T) {
	dir := t.TempDir()
	ssh := filepath.Join(dir, "ssh")
	if err := os.WriteFile(ssh, []byte(fakeMuxSSH), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, _, stderr, _ := gorun(t, ctx, "env", "--ssh", ssh, "-H", "hostA:4", "--bootstrap-addr", "127.0.0.1", "-x", "GORUN_TEST_CHILD")
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
}
