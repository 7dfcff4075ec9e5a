// Package ibv is the only place in goccl that calls libibverbs. It wraps the
// few verbs the verbs transport needs (device list, port and GID queries,
// protection domain, memory regions, completion queues with completion
// channels, RC queue pairs, posting and polling) behind small Go interfaces,
// so that the transport above it holds no cgo and can be read, vetted and
// built without the C toolchain.
//
// With cgo on Linux (and without the goccl_noverbs build tag) Open loads
// libibverbs.so.1 at run time (dlopen and dlvsym, as NCCL does) against
// goccl's own declarations of the library's stable ABI (ibv_abi.h): the
// build needs neither rdma-core's headers nor the library, and a binary
// starts on a host without them. Where the library is missing, and in
// builds without cgo or with the goccl_noverbs tag, Open returns an error
// wrapping transport.ErrNotSupported that says why, and the rest of goccl
// falls back to TCP. ibv_abi_test.go checks ibv_abi.h against rdma-core's
// verbs.h where the headers are installed.
//
// Memory passed to RegMR and to the Post calls is given as an address, never
// as a Go pointer kept by C: the caller guarantees that it stays mapped and
// does not move while registered (mmap memory, or Go memory pinned with
// runtime.Pinner for the registration's lifetime).
//
// The package may import only the standard library and goccl's transport
// package.
package ibv

import (
	"fmt"
)

// Port states (enum ibv_port_state).
const (
	PortDown   = 1
	PortInit   = 2
	PortArmed  = 3
	PortActive = 4
)

// Link layers (IBV_LINK_LAYER_*).
const (
	LinkLayerUnspecified = 0
	LinkLayerInfiniBand  = 1
	LinkLayerEthernet    = 2
)

// GIDType is the type of a GID table entry.
type GIDType int

const (
	GIDTypeIB GIDType = iota
	GIDTypeRoCEv1
	GIDTypeRoCEv2
)

func (t GIDType) String() string {
	switch t {
	case GIDTypeIB:
		return "IB"
	case GIDTypeRoCEv1:
		return "RoCEv1"
	case GIDTypeRoCEv2:
		return "RoCEv2"
	}
	return fmt.Sprintf("gid-type(%d)", int(t))
}

// GID is a 128-bit global identifier.
type GID [16]byte

// IsZero reports an unused GID table entry.
func (g GID) IsZero() bool { return g == GID{} }

// IPv4 returns the address of an IPv4-mapped GID (::ffff:a.b.c.d).
func (g GID) IPv4() ([4]byte, bool) {
	for i := 0; i < 10; i++ {
		if g[i] != 0 {
			return [4]byte{}, false
		}
	}
	if g[10] != 0xff || g[11] != 0xff {
		return [4]byte{}, false
	}
	return [4]byte{g[12], g[13], g[14], g[15]}, true
}

func (g GID) String() string {
	if v4, ok := g.IPv4(); ok {
		return fmt.Sprintf("::ffff:%d.%d.%d.%d", v4[0], v4[1], v4[2], v4[3])
	}
	s := ""
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			s += ":"
		}
		s += fmt.Sprintf("%02x%02x", g[i], g[i+1])
	}
	return s
}

// MTUBytes converts an enum ibv_mtu (1..5) to bytes (256..4096); 0 if invalid.
func MTUBytes(e int) int {
	if e < 1 || e > 5 {
		return 0
	}
	return 128 << e
}

// MTUEnum converts bytes (256..4096, a power of two) to enum ibv_mtu; 0 if invalid.
func MTUEnum(b int) int {
	for e := 1; e <= 5; e++ {
		if 128<<e == b {
			return e
		}
	}
	return 0
}

// DeviceAttr holds the device limits the transport uses.
type DeviceAttr struct {
	PhysPortCnt int
	MaxQPWR     int
	MaxCQE      int
	MaxSGE      int
	MaxQPRdAtom int
	MaxMRSize   uint64
}

// PortAttr holds the port attributes the transport uses.
type PortAttr struct {
	State       int
	MaxMTU      int // bytes
	ActiveMTU   int // bytes
	LID         uint16
	LinkLayer   int
	GIDTableLen int
}

// GIDEntry is one GID table entry.
type GIDEntry struct {
	Index int
	GID   GID
	Type  GIDType
}

// Access flags of a memory region (IBV_ACCESS_*).
type Access int

const (
	AccessLocalWrite  Access = 1
	AccessRemoteWrite Access = 2
	AccessRemoteRead  Access = 4
)

// Work completion status codes used by the transport (enum ibv_wc_status).
const (
	WCSuccess        = 0
	WCLocLenErr      = 1
	WCLocQPOpErr     = 2
	WCLocProtErr     = 4
	WCWRFlushErr     = 5
	WCLocAccessErr   = 8
	WCRemInvReqErr   = 9
	WCRemAccessErr   = 10
	WCRemOpErr       = 11
	WCRetryExcErr    = 12
	WCRNRRetryExcErr = 13
)

// statusText is ibv_wc_status_str's text for each enum ibv_wc_status
// (TestStatusStringMatchesLibrary compares it with the library's).
var statusText = [...]string{
	"success",
	"local length error",
	"local QP operation error",
	"local EE context operation error",
	"local protection error",
	"Work Request Flushed Error",
	"memory management operation error",
	"bad response error",
	"local access error",
	"remote invalid request error",
	"remote access error",
	"remote operation error",
	"transport retry counter exceeded",
	"RNR retry counter exceeded",
	"local RDD violation error",
	"remote invalid RD request",
	"aborted error",
	"invalid EE context number",
	"invalid EE context state",
	"fatal error",
	"response timeout error",
	"general error",
	"TM error",
	"TM software rendezvous",
}

// StatusString names a work completion status as ibv_wc_status_str does.
func StatusString(status uint32) string {
	if int(status) < len(statusText) {
		return statusText[status]
	}
	return "unknown"
}

// Work completion opcodes (enum ibv_wc_opcode).
const (
	WCOpSend            = 0
	WCOpRDMAWrite       = 1
	WCOpRDMARead        = 2
	WCOpRecv            = 128
	WCOpRecvRDMAWithImm = 129
)

// WC is one work completion, flattened (the C struct has unions).
type WC struct {
	WRID      uint64
	Status    uint32
	Opcode    uint32
	ByteLen   uint32
	Imm       uint32 // host order
	QPNum     uint32
	VendorErr uint32
	HasImm    bool
}

// SendOp is the opcode of a send work request.
type SendOp int

const (
	OpSend SendOp = iota
	OpWrite
	OpWriteImm
	OpRead
)

// SendWR is one send-queue work request with at most one scatter/gather
// element (none when Len is 0).
type SendWR struct {
	WRID       uint64
	Op         SendOp
	Addr       uintptr
	Len        int
	LKey       uint32
	RemoteAddr uint64
	RKey       uint32
	Imm        uint32 // host order
	Inline     bool
}

// RTRAttr is what moving an RC queue pair to ready-to-receive needs.
type RTRAttr struct {
	Port      int
	DestQPN   uint32
	RQPSN     uint32
	DGID      GID
	SGIDIndex int
	DLID      uint16
	Global    bool // RoCE, or IB across subnets: use the GRH
	MTU       int  // bytes
	MaxRdAtom int
}

// RTSAttr is what moving an RC queue pair to ready-to-send needs.
type RTSAttr struct {
	SQPSN     uint32
	Timeout   int // 4.096us * 2^Timeout
	RetryCnt  int
	RNRRetry  int // 7 = retry forever
	MaxRdAtom int
}

// Lib is the verbs library.
type Lib interface {
	// DeviceNames lists the RDMA devices (ibv_get_device_list).
	DeviceNames() ([]string, error)
	// Open opens a device by name (ibv_open_device).
	Open(name string) (Context, error)
}

// Context is an opened device.
type Context interface {
	Name() string
	QueryDevice() (DeviceAttr, error)
	QueryPort(port int) (PortAttr, error)
	// QueryGID returns one GID table entry and its type.
	QueryGID(port, index int) (GIDEntry, error)
	AllocPD() (PD, error)
	// NewCQ creates a completion queue with at least depth entries and its
	// own completion channel, armed for the next completion.
	NewCQ(depth int) (CQ, error)
	Close() error
}

// PD is a protection domain.
type PD interface {
	// RegMR registers [addr, addr+n) with exactly the given access.
	RegMR(addr uintptr, n int, access Access) (MR, error)
	// NewQP creates an RC queue pair whose send and receive completions go to cq.
	NewQP(cq CQ, maxSend, maxRecv, maxInline int) (QP, error)
	Close() error
}

// MR is a memory region.
type MR interface {
	LKey() uint32
	RKey() uint32
	// Dereg deregisters the region (ibv_dereg_mr), revoking its keys.
	Dereg() error
}

// CQ is a completion queue with a non-blocking completion channel.
type CQ interface {
	// Poll moves up to len(wc) completions into wc.
	Poll(wc []WC) (int, error)
	// Fd is the completion channel's file descriptor, non-blocking; it
	// becomes readable when an event is pending.
	Fd() int
	// ConsumeEvent takes one pending event, acknowledges it and re-arms the
	// queue. It returns false (and no error) if no event was pending.
	ConsumeEvent() (bool, error)
	Close() error
}

// QP is an RC queue pair.
type QP interface {
	Num() uint32
	// MaxInline is the inline size the device granted.
	MaxInline() int
	// Init moves the queue pair from RESET to INIT.
	Init(port int, access Access) error
	RTR(a RTRAttr) error
	RTS(a RTSAttr) error
	// SetError moves the queue pair to the error state, flushing every
	// posted work request.
	SetError() error
	PostSend(wr SendWR) error
	PostRecv(wrid uint64, addr uintptr, n int, lkey uint32) error
	Close() error
}
