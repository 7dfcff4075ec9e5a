package verbs

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/verbs/internal/ibv"
)

// address is what an endpoint publishes (LocalAddress) and what its peer
// needs to bring its queue pairs to RTR: the queue pair numbers and initial
// packet sequence numbers of the data and control queue pairs, the port's
// GID and LID and the port's active MTU (the path MTU is the smaller of the
// two sides' active MTUs).
//
// Wire format, version 1, 48 bytes, big endian:
//
//	0  "GCVB"   magic
//	4  u8       version (1)
//	5  u8       link layer (1 InfiniBand, 2 Ethernet)
//	6  u16      active MTU in bytes (256..4096, a power of two)
//	8  u32      data queue pair number (24 bits)
//	12 u32      data initial PSN (24 bits)
//	16 u32      control queue pair number (24 bits)
//	20 u32      control initial PSN (24 bits)
//	24 u16      LID
//	26 u16      reserved, zero
//	28 [16]     GID
//	44 u32      reserved, zero
type address struct {
	LinkLayer uint8
	MTU       int
	QPN       uint32
	PSN       uint32
	CtlQPN    uint32
	CtlPSN    uint32
	LID       uint16
	GID       ibv.GID
}

const (
	addressMagic   = "GCVB"
	addressVersion = 1
	addressLen     = 48
)

var errAddress = errors.New("bad verbs address")

func (a address) encode() []byte {
	b := make([]byte, addressLen)
	copy(b, addressMagic)
	b[4] = addressVersion
	b[5] = a.LinkLayer
	binary.BigEndian.PutUint16(b[6:], uint16(a.MTU))
	binary.BigEndian.PutUint32(b[8:], a.QPN)
	binary.BigEndian.PutUint32(b[12:], a.PSN)
	binary.BigEndian.PutUint32(b[16:], a.CtlQPN)
	binary.BigEndian.PutUint32(b[20:], a.CtlPSN)
	binary.BigEndian.PutUint16(b[24:], a.LID)
	copy(b[28:44], a.GID[:])
	return b
}

// decodeAddress parses and validates a peer's blob. Errors wrap
// transport.ErrInvalid.
func decodeAddress(b []byte) (address, error) {
	bad := func(format string, args ...any) (address, error) {
		return address{}, fmt.Errorf("verbs: %w: %s: %w", errAddress, fmt.Sprintf(format, args...), transport.ErrInvalid)
	}
	if len(b) < 5 {
		return bad("%d bytes", len(b))
	}
	if string(b[:4]) != addressMagic {
		return bad("magic %q (is it a verbs endpoint's address?)", b[:4])
	}
	if b[4] != addressVersion {
		return bad("version %d, want %d", b[4], addressVersion)
	}
	if len(b) != addressLen {
		return bad("%d bytes, want %d", len(b), addressLen)
	}
	a := address{
		LinkLayer: b[5],
		MTU:       int(binary.BigEndian.Uint16(b[6:])),
		QPN:       binary.BigEndian.Uint32(b[8:]),
		PSN:       binary.BigEndian.Uint32(b[12:]),
		CtlQPN:    binary.BigEndian.Uint32(b[16:]),
		CtlPSN:    binary.BigEndian.Uint32(b[20:]),
		LID:       binary.BigEndian.Uint16(b[24:]),
	}
	copy(a.GID[:], b[28:44])
	switch {
	case a.LinkLayer != ibv.LinkLayerInfiniBand && a.LinkLayer != ibv.LinkLayerEthernet:
		return bad("link layer %d", a.LinkLayer)
	case ibv.MTUEnum(a.MTU) == 0:
		return bad("MTU %d", a.MTU)
	case a.QPN == 0 || a.QPN >= 1<<24 || a.CtlQPN == 0 || a.CtlQPN >= 1<<24 || a.QPN == a.CtlQPN:
		return bad("queue pair numbers %d, %d", a.QPN, a.CtlQPN)
	case a.PSN >= 1<<24 || a.CtlPSN >= 1<<24:
		return bad("PSNs %d, %d", a.PSN, a.CtlPSN)
	case binary.BigEndian.Uint16(b[26:]) != 0 || binary.BigEndian.Uint32(b[44:]) != 0:
		return bad("reserved bytes set")
	case a.LinkLayer == ibv.LinkLayerEthernet && a.GID.IsZero():
		return bad("zero GID on an Ethernet (RoCE) port")
	}
	return a, nil
}

// pathMTU is the MTU both sides can use: the smaller of the two ports'
// active MTUs.
func pathMTU(local, remote int) int {
	if remote < local {
		return remote
	}
	return local
}
