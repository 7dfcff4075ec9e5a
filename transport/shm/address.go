package shm

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"

	"github.com/goccl/goccl/transport"
)

// The address blob an endpoint publishes (addressSize bytes, little endian):
//
//	0  magic   [3]byte "gcs"
//	3  version uint8   addressVersion
//	4  pid     uint32  the process of the device, in its pid namespace
//	8  host    [16]byte hash of the host identity (HostID)
//	24 device  [16]byte the device's random token: its socket's abstract name
//	40 token   [16]byte the endpoint's random token
//
// The pid and the tokens are what the credential check compares with the
// connecting process (SO_PEERCRED) and its hello; the host hash lets
// Connect refuse a peer on another host (or in another network, pid or user
// namespace) at once, with a clear error, instead of failing to find its
// socket.
const (
	addressSize    = 56
	addressVersion = 1
)

var addressMagic = [3]byte{'g', 'c', 's'}

type address struct {
	pid    uint32
	host   [16]byte
	device [16]byte
	token  [16]byte
}

func (a *address) encode() []byte {
	b := make([]byte, addressSize)
	copy(b[0:3], addressMagic[:])
	b[3] = addressVersion
	binary.LittleEndian.PutUint32(b[4:], a.pid)
	copy(b[8:24], a.host[:])
	copy(b[24:40], a.device[:])
	copy(b[40:56], a.token[:])
	return b
}

func (a *address) String() string {
	return fmt.Sprintf("pid %d device %s endpoint %s", a.pid, hex.EncodeToString(a.device[:4]), hex.EncodeToString(a.token[:4]))
}

// socketName is the abstract Unix socket name of the device with token
// dev ("@" is Go's spelling of the leading NUL byte).
func socketName(dev [16]byte) string { return "@goccl-shm/" + hex.EncodeToString(dev[:]) }

// decodeAddress parses an address blob. It never panics; a malformed blob
// is an error wrapping transport.ErrInvalid.
func decodeAddress(b []byte) (address, error) {
	if len(b) != addressSize {
		return address{}, fmt.Errorf("shm: address blob of %d bytes (want %d): %w", len(b), addressSize, transport.ErrInvalid)
	}
	if !bytes.Equal(b[0:3], addressMagic[:]) {
		return address{}, fmt.Errorf("shm: address blob has bad magic %q (not an shm address): %w", b[0:3], transport.ErrInvalid)
	}
	if b[3] != addressVersion {
		return address{}, fmt.Errorf("shm: address blob version %d (want %d): %w", b[3], addressVersion, transport.ErrInvalid)
	}
	a := address{pid: binary.LittleEndian.Uint32(b[4:])}
	copy(a.host[:], b[8:24])
	copy(a.device[:], b[24:40])
	copy(a.token[:], b[40:56])
	if a.pid == 0 || a.pid > 1<<22 {
		return address{}, fmt.Errorf("shm: address blob has pid %d: %w", a.pid, transport.ErrInvalid)
	}
	var zero [16]byte
	if a.device == zero || a.token == zero {
		return address{}, fmt.Errorf("shm: address blob has a zero token: %w", transport.ErrInvalid)
	}
	return a, nil
}
