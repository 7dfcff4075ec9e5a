package main

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// What sshArgv builds survives a POSIX shell word for word.
func TestSSHArgvQuoting(t *testing.T) {
	args := []string{"/bin/echo", "it's", "a b", "$HOME", "`x`", "", "--", "\\n", "ok=1"}
	argv := sshArgv([]string{"ssh", "-p", "22"}, "h1", 1500*time.Millisecond, "/tmp/a dir", args)
	if got := strings.Join(argv[:11], " "); got != "ssh -p 22 -o BatchMode=yes -o ServerAliveInterval=5 -o ServerAliveCountMax=3 -- h1" {
		t.Errorf("ssh part: %q", got)
	}
	remote := argv[len(argv)-1]
	// Replace the wrapper with one that prints its arguments.
	print := strings.Replace(remote, shellQuote(remoteScript), shellQuote(`printf '<%s>' "$0" "$@"`), 1)
	out, err := exec.Command("sh", "-c", print).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "<gorun-rank><1.5></tmp/a dir></bin/echo><it's><a b><$HOME><`x`><><--><\\n><ok=1>"
	if string(out) != want {
		t.Errorf("remote words\n got %s\nwant %s", out, want)
	}
	if strings.Contains(remoteScript, "\n") || strings.Count(remoteScript, "!") != strings.Count(remoteScript, "$!") {
		t.Errorf("the wrapper must be one line with no '!' but in $!")
	}
}
