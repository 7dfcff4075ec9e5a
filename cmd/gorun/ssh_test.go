package main

import (
	"os/exec"
	"slices"
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

func TestMuxPlan(t *testing.T) {
	hosts := []host{{name: "me", slots: 4, local: true}, {name: "a", slots: 1}, {name: "b", slots: 2}, {name: "c", slots: 73}}
	places, err := place(hosts, 80, false)
	if err != nil {
		t.Fatal(err)
	}
	m, err := newMuxPlan("/usr/bin/ssh", hosts, places)
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	// Ranks 0-3 local, 4 on a alone, 5-6 on b (one group), 7-79 on c:
	// groups of 8 from rank 7, the last (rank 79) alone.
	var shares []int
	for _, pl := range places {
		if m.shares(pl) {
			shares = append(shares, pl.rank)
		}
	}
	if len(shares) != 2+8*9 {
		t.Errorf("%d sharing ranks, want %d", len(shares), 2+8*9)
	}
	// One connection for b's ranks 5-6 and 9 for c's groups of 8 from
	// rank 7 (the last, 71-78; rank 79 alone): 8 to a host at once.
	var firsts []int
	for _, w := range m.waves {
		for _, c := range w {
			firsts = append(firsts, c.ranks[0])
		}
	}
	if want := []int{5, 7, 15, 23, 31, 39, 47, 55, 63, 71}; !slices.Equal(firsts, want) {
		t.Errorf("connections' first ranks %v, want %v", firsts, want)
	}
	if len(m.waves) != 2 || len(m.waves[0]) != 1+8 || len(m.waves[1]) != 1 {
		t.Errorf("waves %v", m.waves)
	}
	if o, o5 := m.options(places[6]), m.options(places[5]); len(o) != 4 || o[1] != "ControlMaster=no" || o[3] != o5[3] {
		t.Errorf("rank 6 options %q, rank 5 %q", o, o5)
	}
	if a := connArgv([]string{"ssh"}, "b", m.waves[0][0]); !slices.Contains(a, "ControlMaster=yes") || !slices.Contains(a, "-N") || a[len(a)-1] != "b" {
		t.Errorf("connection argv %q", a)
	}
	if m.options(places[4]) != nil || m.options(places[79]) != nil || m.options(places[0]) != nil {
		t.Errorf("ranks alone or local have mux options")
	}
	if m2, _ := newMuxPlan("fakessh", hosts, places); len(m2.role) != 0 {
		t.Errorf("a non-OpenSSH command shares connections")
	}
}
