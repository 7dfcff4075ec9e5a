package tcp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/goccl/goccl/transport"
)

// The address blob an endpoint publishes (addressSize bytes, big endian):
//
//	0  magic   [3]byte "gct"
//	3  version uint8   addressVersion
//	4  ip      [16]byte IPv6 or IPv4-mapped IPv6 address of the device
//	20 port    uint16  the device's listening port
//	22 token   [16]byte the endpoint's random token
const (
	addressSize    = 38
	addressVersion = 1
)

var addressMagic = [3]byte{'g', 'c', 't'}

// address is a decoded blob.
type address struct {
	ip    netip.Addr // always 16-byte form in the blob; unmapped here
	port  uint16
	token [16]byte
}

func (a *address) encode() []byte {
	b := make([]byte, addressSize)
	copy(b[0:3], addressMagic[:])
	b[3] = addressVersion
	ip16 := a.ip.As16()
	copy(b[4:20], ip16[:])
	binary.BigEndian.PutUint16(b[20:], a.port)
	copy(b[22:38], a.token[:])
	return b
}

func (a *address) String() string {
	return netip.AddrPortFrom(a.ip, a.port).String()
}

// decodeAddress parses an address blob. It never panics; a malformed blob
// is an error wrapping transport.ErrInvalid.
func decodeAddress(b []byte) (address, error) {
	if len(b) != addressSize {
		return address{}, fmt.Errorf("tcp: address blob of %d bytes (want %d): %w", len(b), addressSize, transport.ErrInvalid)
	}
	if !bytes.Equal(b[0:3], addressMagic[:]) {
		return address{}, fmt.Errorf("tcp: address blob has bad magic %q (not a tcp address): %w", b[0:3], transport.ErrInvalid)
	}
	if b[3] != addressVersion {
		return address{}, fmt.Errorf("tcp: address blob version %d (want %d): %w", b[3], addressVersion, transport.ErrInvalid)
	}
	ip := netip.AddrFrom16([16]byte(b[4:20])).Unmap()
	if !ip.IsValid() || ip.IsUnspecified() {
		return address{}, fmt.Errorf("tcp: address blob has unusable ip %v: %w", ip, transport.ErrInvalid)
	}
	port := binary.BigEndian.Uint16(b[20:])
	if port == 0 {
		return address{}, fmt.Errorf("tcp: address blob has port 0: %w", transport.ErrInvalid)
	}
	return address{ip: ip, port: port, token: [16]byte(b[22:38])}, nil
}
