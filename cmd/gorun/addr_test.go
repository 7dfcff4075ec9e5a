package main

import (
	"fmt"
	"net"
	"reflect"
	"testing"
)

func TestPlanStore(t *testing.T) {
	// Every "remote" host resolves to a loopback address, so the route
	// to it starts at 127.0.0.1 too.
	resolve := func(name string) (net.IP, error) {
		if name == "unknown" {
			return nil, fmt.Errorf("no such host")
		}
		return net.ParseIP("127.0.0.1"), nil
	}
	local := host{name: "me", slots: 1, local: true}
	remote := host{name: "r1", slots: 1}
	tests := []struct {
		flag  string
		hosts []host
		want  storePlan
		err   string
	}{
		{"", []host{local}, storePlan{"127.0.0.1:0", []string{"127.0.0.1"}}, ""},
		{"", []host{local, remote}, storePlan{"127.0.0.1:0", []string{"127.0.0.1", "127.0.0.1"}}, ""},
		{"10.0.0.5", []host{local, remote}, storePlan{"10.0.0.5:0", []string{"10.0.0.5", "10.0.0.5"}}, ""},
		{"head:29400", []host{remote}, storePlan{"head:29400", []string{"head"}}, ""},
		{":29400", []host{local, remote}, storePlan{":29400", []string{"127.0.0.1", "127.0.0.1"}}, ""},
		{"0.0.0.0", []host{local}, storePlan{":0", []string{"127.0.0.1"}}, ""},
		{"h:port", []host{local}, storePlan{}, `--bootstrap-addr "h:port": bad port "port"`},
		{"", []host{local, {name: "unknown", slots: 1}}, storePlan{}, "resolve host unknown: no such host (or give --bootstrap-addr)"},
	}
	for _, tt := range tests {
		got, err := planStore(tt.flag, tt.hosts, resolve)
		if tt.err != "" {
			if err == nil || err.Error() != tt.err {
				t.Errorf("planStore(%q, %v) error %v, want %q", tt.flag, tt.hosts, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("planStore(%q, %v) = %+v, %v; want %+v", tt.flag, tt.hosts, got, err, tt.want)
		}
	}
}
