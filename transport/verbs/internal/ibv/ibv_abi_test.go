package ibv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/goccl/goccl/transport"
)

// abiStruct pairs one of rdma-core's structs with goccl's declaration of it
// (ibv_abi.h) and the fields whose offsets must agree ("real=ours" where
// the names differ).
type abiStruct struct {
	real, ours string
	sameSize   bool
	fields     []string
}

var abiStructs = []abiStruct{
	{"ibv_device_attr", "gibv_device_attr", true, []string{"max_mr_size", "max_qp_wr", "max_sge", "max_cqe", "max_qp_rd_atom", "phys_port_cnt"}},
	// Ours has spare room at the end (see ibv_abi.h).
	{"ibv_port_attr", "gibv_port_attr", false, []string{"state", "max_mtu", "active_mtu", "gid_tbl_len", "lid", "link_layer", "flags"}},
	{"ibv_gid_entry", "gibv_gid_entry", true, []string{"gid", "gid_index", "port_num", "gid_type", "ndev_ifindex"}},
	{"ibv_comp_channel", "gibv_comp_channel", true, []string{"context", "fd", "refcnt"}},
	{"ibv_mr", "gibv_mr", true, []string{"context", "pd", "addr", "length", "handle", "lkey", "rkey"}},
	{"ibv_qp", "gibv_qp", true, []string{"context", "pd", "send_cq", "recv_cq", "srq", "handle", "qp_num", "state", "qp_type", "mutex", "cond", "events_completed"}},
	{"ibv_wc", "gibv_wc", true, []string{"wr_id", "status", "opcode", "vendor_err", "byte_len", "imm_data", "qp_num", "src_qp", "wc_flags", "pkey_index", "slid", "sl", "dlid_path_bits"}},
	{"ibv_sge", "gibv_sge", true, []string{"addr", "length", "lkey"}},
	{"ibv_send_wr", "gibv_send_wr", true, []string{"wr_id", "next", "sg_list", "num_sge", "opcode", "send_flags", "imm_data",
		"wr.rdma.remote_addr", "wr.rdma.rkey", "wr.atomic.rkey", "qp_type", "bind_mw=ext.bind_mw", "tso.mss=ext.tso.mss"}},
	{"ibv_recv_wr", "gibv_recv_wr", true, []string{"wr_id", "next", "sg_list", "num_sge"}},
	{"ibv_qp_cap", "gibv_qp_cap", true, []string{"max_send_wr", "max_recv_wr", "max_send_sge", "max_recv_sge", "max_inline_data"}},
	{"ibv_qp_init_attr", "gibv_qp_init_attr", true, []string{"qp_context", "send_cq", "recv_cq", "srq", "cap", "qp_type", "sq_sig_all"}},
	{"ibv_ah_attr", "gibv_ah_attr", true, []string{"grh.dgid", "grh.flow_label", "grh.sgid_index", "grh.hop_limit", "grh.traffic_class",
		"dlid", "sl", "src_path_bits", "static_rate", "is_global", "port_num"}},
	{"ibv_qp_attr", "gibv_qp_attr", true, []string{"qp_state", "path_mtu", "qkey", "rq_psn", "sq_psn", "dest_qp_num", "qp_access_flags", "cap",
		"ah_attr", "alt_ah_attr", "pkey_index", "max_rd_atomic", "max_dest_rd_atomic", "min_rnr_timer", "port_num", "timeout",
		"retry_cnt", "rnr_retry", "rate_limit"}},
	{"ibv_context_ops", "gibv_context_ops", true, []string{"poll_cq", "req_notify_cq", "post_send", "post_recv"}},
	{"ibv_context", "gibv_context", true, []string{"device", "ops", "cmd_fd", "async_fd", "num_comp_vectors", "mutex", "abi_compat"}},
}

// abiConstants are rdma-core's enum values ibv_abi.h restates.
var abiConstants = []string{
	"QPS_RESET", "QPS_INIT", "QPS_RTR", "QPS_RTS", "QPS_ERR", "QPT_RC",
	"QP_STATE", "QP_ACCESS_FLAGS", "QP_PKEY_INDEX", "QP_PORT", "QP_AV", "QP_PATH_MTU", "QP_TIMEOUT",
	"QP_RETRY_CNT", "QP_RNR_RETRY", "QP_RQ_PSN", "QP_MAX_QP_RD_ATOMIC", "QP_MIN_RNR_TIMER", "QP_SQ_PSN",
	"QP_MAX_DEST_RD_ATOMIC", "QP_DEST_QPN",
	"WR_RDMA_WRITE", "WR_RDMA_WRITE_WITH_IMM", "WR_SEND", "WR_RDMA_READ",
	"SEND_SIGNALED", "SEND_INLINE", "WC_WITH_IMM",
	"GID_TYPE_IB", "GID_TYPE_ROCE_V1", "GID_TYPE_ROCE_V2",
}

// abiCheckSource is a C file that compiles only if ibv_abi.h agrees with
// rdma-core's verbs.h on every size, offset and constant goccl relies on,
// and on the Go-side constants of ibv.go.
func abiCheckSource() string {
	var b strings.Builder
	b.WriteString("#include <stddef.h>\n#include <infiniband/verbs.h>\n#include \"ibv_abi.h\"\n")
	b.WriteString("#define SAME(c, msg) _Static_assert(c, msg)\n")
	for _, s := range abiStructs {
		if s.sameSize {
			fmt.Fprintf(&b, "SAME(sizeof(struct %s) == sizeof(struct %s), \"sizeof %s\");\n", s.real, s.ours, s.real)
		} else {
			fmt.Fprintf(&b, "SAME(sizeof(struct %s) <= sizeof(struct %s), \"sizeof %s\");\n", s.real, s.ours, s.real)
		}
		for _, f := range s.fields {
			real, ours, ok := strings.Cut(f, "=")
			if !ok {
				ours = real
			}
			fmt.Fprintf(&b, "SAME(offsetof(struct %s, %s) == offsetof(struct %s, %s), \"%s.%s\");\n", s.real, real, s.ours, ours, s.real, real)
		}
	}
	for _, c := range abiConstants {
		fmt.Fprintf(&b, "SAME(IBV_%s == GIBV_%s, \"IBV_%s\");\n", c, c, c)
	}
	// The values ibv.go uses without C.
	goConsts := map[string]int{
		"IBV_PORT_ACTIVE": PortActive, "IBV_LINK_LAYER_ETHERNET": LinkLayerEthernet, "IBV_LINK_LAYER_INFINIBAND": LinkLayerInfiniBand,
		"IBV_ACCESS_LOCAL_WRITE": int(AccessLocalWrite), "IBV_ACCESS_REMOTE_WRITE": int(AccessRemoteWrite), "IBV_ACCESS_REMOTE_READ": int(AccessRemoteRead),
		"IBV_WC_SUCCESS": WCSuccess, "IBV_WC_LOC_LEN_ERR": WCLocLenErr, "IBV_WC_LOC_QP_OP_ERR": WCLocQPOpErr, "IBV_WC_LOC_PROT_ERR": WCLocProtErr,
		"IBV_WC_WR_FLUSH_ERR": WCWRFlushErr, "IBV_WC_LOC_ACCESS_ERR": WCLocAccessErr, "IBV_WC_REM_INV_REQ_ERR": WCRemInvReqErr,
		"IBV_WC_REM_ACCESS_ERR": WCRemAccessErr, "IBV_WC_REM_OP_ERR": WCRemOpErr, "IBV_WC_RETRY_EXC_ERR": WCRetryExcErr,
		"IBV_WC_RNR_RETRY_EXC_ERR": WCRNRRetryExcErr, "IBV_WC_SEND": WCOpSend, "IBV_WC_RDMA_WRITE": WCOpRDMAWrite,
		"IBV_WC_RDMA_READ": WCOpRDMARead, "IBV_WC_RECV": WCOpRecv, "IBV_WC_RECV_RDMA_WITH_IMM": WCOpRecvRDMAWithImm,
		"IBV_MTU_256": MTUEnum(256), "IBV_MTU_4096": MTUEnum(4096),
	}
	for name, v := range goConsts {
		fmt.Fprintf(&b, "SAME(%s == %d, \"%s\");\n", name, v, name)
	}
	return b.String()
}

// TestABIMatchesHeaders compiles abiCheckSource against rdma-core's
// headers: goccl's own ABI declarations must match them exactly. It skips
// where the headers (Debian: libibverbs-dev) or a C compiler are missing:
// goccl itself builds without them.
func TestABIMatchesHeaders(t *testing.T) {
	if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
		t.Skipf("skipping: rdma-core's headers are not installed (libibverbs-dev): %v", err)
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("skipping: no C compiler: %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "abi_check.c")
	if err := os.WriteFile(src, []byte(abiCheckSource()), 0o644); err != nil {
		t.Fatal(err)
	}
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(cc, "-std=gnu11", "-fsyntax-only", "-I", here, src).CombinedOutput()
	if err != nil {
		t.Fatalf("ibv_abi.h disagrees with rdma-core's verbs.h: %v\n%s", err, out)
	}
	t.Logf("%d structs and %d constants agree with /usr/include/infiniband/verbs.h", len(abiStructs), len(abiConstants))
}

// TestStatusStringMatchesLibrary compares StatusString with libibverbs'
// ibv_wc_status_str, where this build can load the library.
func TestStatusStringMatchesLibrary(t *testing.T) {
	if _, ok := libraryStatusString(0); !ok {
		_, err := Open()
		t.Skipf("skipping: %v", err)
	}
	for s := range uint32(len(statusText) + 1) {
		lib, _ := libraryStatusString(s)
		if got := StatusString(s); got != lib {
			t.Errorf("StatusString(%d) = %q, libibverbs says %q", s, got, lib)
		}
	}
}

// TestOpenAtRunTime: where libibverbs.so.1 is installed, a cgo build loads
// it at run time and lists the devices (none, on a machine without RDMA);
// elsewhere Open says why with ErrNotSupported.
func TestOpenAtRunTime(t *testing.T) {
	lib, err := Open()
	if err != nil {
		if !errors.Is(err, transport.ErrNotSupported) {
			t.Fatalf("Open: %v; want nil or an error wrapping ErrNotSupported", err)
		}
		// Installed: a shared object (not the empty file a test may mount
		// over it to hide it).
		installed := false
		for _, d := range []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib/x86_64-linux-gnu"} {
			if b, rerr := os.ReadFile(filepath.Join(d, "libibverbs.so.1")); rerr == nil && strings.HasPrefix(string(b), "\x7fELF") {
				installed = true
			}
		}
		if Available && installed {
			t.Fatalf("libibverbs.so.1 is installed but Open failed: %v", err)
		}
		t.Skipf("skipping: %v", err)
	}
	names, err := lib.DeviceNames()
	switch {
	case errors.Is(err, syscall.ENOSYS):
		t.Logf("libibverbs loaded at run time; the kernel has no RDMA support: %v", err)
	case err != nil:
		t.Fatalf("DeviceNames: %v", err)
	default:
		t.Logf("libibverbs loaded at run time; devices: %q", names)
	}
}
