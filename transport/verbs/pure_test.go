package verbs

// Tests of the parts that need no adapter: address blob, device selection
// syntax, GID choice, MTU negotiation.

import (
	"bytes"
	"errors"
	"testing"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/verbs/internal/ibv"
)

func testAddress() address {
	a := address{
		LinkLayer: ibv.LinkLayerEthernet,
		MTU:       1024,
		QPN:       0x11,
		PSN:       0xabcdef,
		CtlQPN:    0x12,
		CtlPSN:    0x123456,
		LID:       0,
	}
	copy(a.GID[:], []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 2, 15})
	return a
}

func TestAddressRoundTrip(t *testing.T) {
	a := testAddress()
	b := a.encode()
	if len(b) != addressLen {
		t.Fatalf("encoded %d bytes, want %d", len(b), addressLen)
	}
	got, err := decodeAddress(b)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if got != a {
		t.Fatalf("round trip: got %+v, want %+v", got, a)
	}
}

func TestAddressRejects(t *testing.T) {
	good := testAddress().encode()
	mut := func(f func(b []byte)) []byte {
		b := bytes.Clone(good)
		f(b)
		return b
	}
	cases := map[string][]byte{
		"empty":       nil,
		"short":       good[:20],
		"long":        append(bytes.Clone(good), 0),
		"magic":       mut(func(b []byte) { b[0] = 'X' }),
		"version":     mut(func(b []byte) { b[4] = 2 }),
		"link layer":  mut(func(b []byte) { b[5] = 9 }),
		"mtu":         mut(func(b []byte) { b[6], b[7] = 0x03, 0x00 }),
		"qpn zero":    mut(func(b []byte) { copy(b[8:12], []byte{0, 0, 0, 0}) }),
		"qpn 25 bits": mut(func(b []byte) { b[8] = 1 }),
		"psn":         mut(func(b []byte) { b[12] = 1 }),
		"same qpn":    mut(func(b []byte) { copy(b[16:20], b[8:12]) }),
		"reserved":    mut(func(b []byte) { b[47] = 1 }),
		"zero gid":    mut(func(b []byte) { clear(b[28:44]) }),
	}
	for name, b := range cases {
		if _, err := decodeAddress(b); !errors.Is(err, transport.ErrInvalid) {
			t.Errorf("%s: decode error %v, want one wrapping ErrInvalid", name, err)
		}
	}
}

func FuzzDecodeAddress(f *testing.F) {
	f.Add(testAddress().encode())
	f.Add([]byte("GCVB"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := decodeAddress(b)
		if err != nil {
			if !errors.Is(err, transport.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if !bytes.Equal(a.encode(), b) {
			t.Fatalf("accepted blob does not re-encode to itself: %x", b)
		}
		if ibv.MTUEnum(a.MTU) == 0 || a.QPN == 0 || a.QPN >= 1<<24 {
			t.Fatalf("accepted invalid address %+v", a)
		}
	})
}

func TestPathMTU(t *testing.T) {
	for _, c := range []struct{ local, remote, want int }{
		{4096, 1024, 1024},
		{1024, 4096, 1024},
		{2048, 2048, 2048},
		{256, 4096, 256},
	} {
		if got := pathMTU(c.local, c.remote); got != c.want {
			t.Errorf("pathMTU(%d, %d) = %d, want %d", c.local, c.remote, got, c.want)
		}
	}
}

func TestParseHCA(t *testing.T) {
	type probe struct {
		name string
		port int
		want bool
	}
	cases := []struct {
		spec   string
		probes []probe
	}{
		{"", []probe{{"rxe0", 1, true}, {"mlx5_0", 2, true}}},
		{"rxe0", []probe{{"rxe0", 1, true}, {"rxe01", 1, true}, {"mlx5_0", 1, false}}},
		{"=rxe0", []probe{{"rxe0", 1, true}, {"rxe01", 1, false}}},
		{"mlx5", []probe{{"mlx5_0", 1, true}, {"mlx5_1", 2, true}, {"rxe0", 1, false}}},
		{"^mlx5_1", []probe{{"mlx5_0", 1, true}, {"mlx5_1", 1, false}, {"rxe0", 1, true}}},
		{"^=mlx5", []probe{{"mlx5", 1, false}, {"mlx5_0", 1, true}}},
		{"=^mlx5", []probe{{"mlx5", 1, false}, {"mlx5_0", 1, true}}},
		{"mlx5_0:1,mlx5_1", []probe{{"mlx5_0", 1, true}, {"mlx5_0", 2, false}, {"mlx5_1", 2, true}, {"rxe0", 1, false}}},
		{"^mlx5_0:2", []probe{{"mlx5_0", 1, true}, {"mlx5_0", 2, false}, {"rxe0", 1, true}}},
	}
	for _, c := range cases {
		f, err := parseHCA(c.spec)
		if err != nil {
			t.Errorf("parseHCA(%q): %v", c.spec, err)
			continue
		}
		for _, p := range c.probes {
			got := f.device(p.name) && f.port(p.name, p.port)
			if got != p.want {
				t.Errorf("GOCCL_IB_HCA=%q: %s:%d selected = %v, want %v", c.spec, p.name, p.port, got, p.want)
			}
		}
	}
	for _, bad := range []string{"rxe0:x", "rxe0:0", ":1", "rxe0:300"} {
		if _, err := parseHCA(bad); !errors.Is(err, transport.ErrInvalid) {
			t.Errorf("parseHCA(%q) error %v, want ErrInvalid", bad, err)
		}
	}
}

func gid(b ...byte) ibv.GID {
	var g ibv.GID
	copy(g[16-len(b):], b)
	return g
}

func TestSelectGID(t *testing.T) {
	linkLocal := ibv.GID{0xfe, 0x80, 15: 1}
	v4 := gid(0xff, 0xff, 10, 0, 2, 15)
	table := []ibv.GIDEntry{
		{Index: 0, GID: linkLocal, Type: ibv.GIDTypeRoCEv2},
		{Index: 1, GID: v4, Type: ibv.GIDTypeRoCEv1},
		{Index: 2, GID: ibv.GID{}, Type: ibv.GIDTypeRoCEv2},
		{Index: 3, GID: v4, Type: ibv.GIDTypeRoCEv2},
	}
	cases := []struct {
		name      string
		link      int
		entries   []ibv.GIDEntry
		override  int
		wantIndex int
		wantErr   bool
	}{
		{"roce v2 ipv4 preferred", ibv.LinkLayerEthernet, table, -1, 3, false},
		{"rxe table (link-local, ipv4)", ibv.LinkLayerEthernet, []ibv.GIDEntry{
			{Index: 0, GID: linkLocal, Type: ibv.GIDTypeRoCEv2}, {Index: 1, GID: v4, Type: ibv.GIDTypeRoCEv2}}, -1, 1, false},
		{"v2 without ipv4", ibv.LinkLayerEthernet, table[:3], -1, 0, false},
		{"v1 only", ibv.LinkLayerEthernet, table[1:3], -1, 1, false},
		{"override", ibv.LinkLayerEthernet, table, 1, 1, false},
		{"override unused", ibv.LinkLayerEthernet, table, 2, 0, true},
		{"override missing", ibv.LinkLayerEthernet, table, 9, 0, true},
		{"no usable gid", ibv.LinkLayerEthernet, table[2:3], -1, 0, true},
		{"infiniband index 0", ibv.LinkLayerInfiniBand, []ibv.GIDEntry{{Index: 0, GID: linkLocal, Type: ibv.GIDTypeIB}}, -1, 0, false},
	}
	for _, c := range cases {
		e, err := selectGID(c.link, c.entries, c.override)
		if c.wantErr {
			if err == nil {
				t.Errorf("%s: selected %d, want an error", c.name, e.Index)
			}
			continue
		}
		if err != nil || e.Index != c.wantIndex {
			t.Errorf("%s: selected %d (%v), want %d", c.name, e.Index, err, c.wantIndex)
		}
	}
}

func TestAccessMapping(t *testing.T) {
	cases := map[transport.Access]ibv.Access{
		0:                           0,
		transport.AccessLocalWrite:  ibv.AccessLocalWrite,
		transport.AccessRemoteRead:  ibv.AccessRemoteRead,
		transport.AccessRemoteWrite: ibv.AccessLocalWrite | ibv.AccessRemoteWrite,
		transport.AccessAll:         ibv.AccessLocalWrite | ibv.AccessRemoteWrite | ibv.AccessRemoteRead,
	}
	for a, want := range cases {
		if got := ibvAccess(a); got != want {
			t.Errorf("ibvAccess(%v) = %d, want %d", a, got, want)
		}
	}
}
