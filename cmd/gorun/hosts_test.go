package main

import (
	"net"
	"reflect"
	"strings"
	"testing"
)

func TestParseHostList(t *testing.T) {
	tests := []struct {
		in   string
		want []host
		err  string
	}{
		{"a:2,b,c:1", []host{{name: "a", slots: 2}, {name: "b", slots: 1}, {name: "c", slots: 1}}, ""},
		{"a:2,b:3,a:1", []host{{name: "a", slots: 3}, {name: "b", slots: 3}}, ""},
		{"10.77.0.2:4", []host{{name: "10.77.0.2", slots: 4}}, ""},
		{"[::1]:2,[fe80::1]", []host{{name: "::1", slots: 2}, {name: "fe80::1", slots: 1}}, ""},
		{"a,,b", nil, "empty host name"},
		{"a:0", nil, "between 1 and 4096"},
		{"a:x", nil, "between 1 and 4096"},
		{":3", nil, "empty host name"},
	}
	for _, tt := range tests {
		got, err := parseHostList(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("parseHostList(%q) error %v, want one containing %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("parseHostList(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

func TestParseHostfile(t *testing.T) {
	got, err := parseHostfile("hosts", strings.NewReader("# cluster\nn1 slots=4\n\n  n2   # one slot\nn3 slots=2\nn1 slots=1\n"))
	want := []host{{name: "n1", slots: 5}, {name: "n2", slots: 1}, {name: "n3", slots: 2}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, %v; want %+v", got, err, want)
	}
	for in, msg := range map[string]string{
		"n1 max_slots=4\n": `hosts:1: "max_slots=4": want "host slots=N"`,
		"\nn1 slots=0\n":   `hosts:2: slots="0" must be an integer between 1 and 4096`,
		"# nothing\n":      "hosts: no hosts",
	} {
		if _, err := parseHostfile("hosts", strings.NewReader(in)); err == nil || err.Error() != msg {
			t.Errorf("parseHostfile(%q) error %v, want %q", in, err, msg)
		}
	}
}

func TestPlace(t *testing.T) {
	hosts := []host{{name: "a", slots: 2}, {name: "b", slots: 1}, {name: "c", slots: 3}}
	type p = placement
	got, err := place(hosts, 4, false)
	want := []p{{0, 0, 0, 2}, {1, 0, 1, 2}, {2, 1, 0, 1}, {3, 2, 0, 1}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("place 4: %v, %v; want %v", got, err, want)
	}
	if _, err := place(hosts, 7, false); err == nil || !strings.Contains(err.Error(), "7 ranks asked for but the hosts have 6 slots") {
		t.Errorf("place 7 without oversubscribe: %v", err)
	}
	got, err = place(hosts[:2], 5, true)
	want = []p{{0, 0, 0, 4}, {1, 0, 1, 4}, {2, 1, 0, 1}, {3, 0, 2, 4}, {4, 0, 3, 4}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("place 5 oversubscribed: %v, %v; want %v", got, err, want)
	}
	// Two names of this machine (-H localhost:1,$(hostname):1, both
	// marked local) are one machine: its local ranks count across both.
	// Before, both ranks got LOCAL_RANK 0 of 1 (a helper's hunt).
	two := []host{{name: "localhost", slots: 1, local: true}, {name: "b", slots: 1}, {name: "self", slots: 2, local: true}}
	got, err = place(two, 4, false)
	want = []p{{0, 0, 0, 3}, {1, 1, 0, 1}, {2, 2, 1, 3}, {3, 2, 2, 3}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("place on two names of this machine: %v, %v; want %v", got, err, want)
	}
}

func TestIsLocal(t *testing.T) {
	mine := []net.IP{net.ParseIP("10.77.0.1")}
	for name, want := range map[string]bool{
		"localhost": true, "self": true, "127.0.0.1": true, "127.0.1.1": true, "10.77.0.1": true,
		"10.77.0.2": false, "::1": true, "no-such-host.invalid": false,
	} {
		if got := isLocal(name, "self", mine); got != want {
			t.Errorf("isLocal(%q) = %v, want %v", name, got, want)
		}
	}
}
