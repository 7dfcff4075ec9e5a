//go:build cgo && linux && !goccl_noverbs

package ibv

/*
#cgo LDFLAGS: -libverbs
#include <infiniband/verbs.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

// ibv_query_port and ibv_reg_mr are macros in rdma-core 44: wrap them.
static int goccl_query_port(struct ibv_context *ctx, int port, struct ibv_port_attr *a) {
	return ibv_query_port(ctx, (uint8_t)port, a);
}

static struct ibv_mr *goccl_reg_mr(struct ibv_pd *pd, uintptr_t addr, size_t n, int access) {
	return ibv_reg_mr(pd, (void *)addr, n, access);
}

// goccl_query_gid returns the GID and its type; the type comes from
// ibv_query_gid_ex when the device supports it, else RoCE v2 is assumed for
// Ethernet ports (rxe) by the caller.
static int goccl_query_gid(struct ibv_context *ctx, int port, int index, uint8_t *gid, int *type) {
	struct ibv_gid_entry e;
	memset(&e, 0, sizeof e);
	int rc = ibv_query_gid_ex(ctx, (uint32_t)port, (uint32_t)index, &e, 0);
	if (rc == 0) {
		memcpy(gid, e.gid.raw, 16);
		*type = (int)e.gid_type;
		return 0;
	}
	union ibv_gid g;
	if (ibv_query_gid(ctx, (uint8_t)port, index, &g) != 0) {
		return rc ? rc : errno;
	}
	memcpy(gid, g.raw, 16);
	*type = -1;
	return 0;
}

struct goccl_cq {
	struct ibv_cq *cq;
	struct ibv_comp_channel *ch;
};

static int goccl_create_cq(struct ibv_context *ctx, int depth, struct goccl_cq *out) {
	out->ch = ibv_create_comp_channel(ctx);
	if (!out->ch) return errno ? errno : EIO;
	int fl = fcntl(out->ch->fd, F_GETFL);
	if (fl < 0 || fcntl(out->ch->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		int e = errno;
		ibv_destroy_comp_channel(out->ch);
		return e;
	}
	out->cq = ibv_create_cq(ctx, depth, NULL, out->ch, 0);
	if (!out->cq) {
		int e = errno ? errno : EIO;
		ibv_destroy_comp_channel(out->ch);
		return e;
	}
	int rc = ibv_req_notify_cq(out->cq, 0);
	if (rc) {
		ibv_destroy_cq(out->cq);
		ibv_destroy_comp_channel(out->ch);
		return rc;
	}
	return 0;
}

// goccl_cq_event returns 1 if an event was consumed (acknowledged, queue
// re-armed), 0 if none was pending, or a negative errno.
static int goccl_cq_event(struct goccl_cq *c) {
	struct ibv_cq *cq;
	void *cqctx;
	if (ibv_get_cq_event(c->ch, &cq, &cqctx) != 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
		return -(errno ? errno : EIO);
	}
	ibv_ack_cq_events(cq, 1);
	int rc = ibv_req_notify_cq(cq, 0);
	if (rc) return -rc;
	return 1;
}

struct goccl_wc {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t byte_len;
	uint32_t imm;
	uint32_t qp_num;
	uint32_t vendor_err;
	uint32_t has_imm;
	uint32_t pad;
};

static int goccl_poll(struct ibv_cq *cq, struct goccl_wc *out, int n) {
	struct ibv_wc wc[32];
	if (n > 32) n = 32;
	int got = ibv_poll_cq(cq, n, wc);
	for (int i = 0; i < got; i++) {
		out[i].wr_id = wc[i].wr_id;
		out[i].status = wc[i].status;
		out[i].opcode = wc[i].opcode;
		out[i].byte_len = wc[i].byte_len;
		out[i].has_imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) != 0;
		out[i].imm = out[i].has_imm ? ntohl(wc[i].imm_data) : 0;
		out[i].qp_num = wc[i].qp_num;
		out[i].vendor_err = wc[i].vendor_err;
	}
	return got;
}

static struct ibv_qp *goccl_create_qp(struct ibv_pd *pd, struct ibv_cq *cq, int max_send, int max_recv, int max_inline, int *got_inline) {
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.send_cq = cq;
	a.recv_cq = cq;
	a.qp_type = IBV_QPT_RC;
	a.sq_sig_all = 1;
	a.cap.max_send_wr = max_send;
	a.cap.max_recv_wr = max_recv;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	a.cap.max_inline_data = max_inline;
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	if (!qp && max_inline > 0) {
		a.cap.max_inline_data = 0;
		qp = ibv_create_qp(pd, &a);
	}
	if (qp) *got_inline = a.cap.max_inline_data;
	return qp;
}

static int goccl_qp_init(struct ibv_qp *qp, int port, int access) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = (uint8_t)port;
	a.qp_access_flags = access;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int goccl_qp_rtr(struct ibv_qp *qp, int port, uint32_t dqpn, uint32_t rq_psn, const uint8_t *dgid,
		int sgid_index, uint16_t dlid, int global, int mtu, int max_rd_atom) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = (enum ibv_mtu)mtu;
	a.dest_qp_num = dqpn;
	a.rq_psn = rq_psn;
	a.max_dest_rd_atomic = (uint8_t)max_rd_atom;
	a.min_rnr_timer = 12;
	a.ah_attr.dlid = dlid;
	a.ah_attr.sl = 0;
	a.ah_attr.src_path_bits = 0;
	a.ah_attr.port_num = (uint8_t)port;
	if (global) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, dgid, 16);
		a.ah_attr.grh.sgid_index = (uint8_t)sgid_index;
		a.ah_attr.grh.hop_limit = 64;
		a.ah_attr.grh.traffic_class = 0;
		a.ah_attr.grh.flow_label = 0;
	}
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
		IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static int goccl_qp_rts(struct ibv_qp *qp, uint32_t sq_psn, int timeout, int retry, int rnr_retry, int max_rd_atom) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = (uint8_t)timeout;
	a.retry_cnt = (uint8_t)retry;
	a.rnr_retry = (uint8_t)rnr_retry;
	a.sq_psn = sq_psn;
	a.max_rd_atomic = (uint8_t)max_rd_atom;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
		IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static int goccl_qp_error(struct ibv_qp *qp) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_ERR;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

// goccl_post_send builds the work request in C: ibv_send_wr.wr is a union.
static int goccl_post_send(struct ibv_qp *qp, uint64_t wrid, int op, uintptr_t addr, uint32_t len, uint32_t lkey,
		uint64_t raddr, uint32_t rkey, uint32_t imm, int inl) {
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof wr);
	sge.addr = (uint64_t)addr;
	sge.length = len;
	sge.lkey = lkey;
	wr.wr_id = wrid;
	if (len > 0) {
		wr.sg_list = &sge;
		wr.num_sge = 1;
	}
	wr.send_flags = IBV_SEND_SIGNALED | (inl && len > 0 ? IBV_SEND_INLINE : 0);
	switch (op) {
	case 0: wr.opcode = IBV_WR_SEND; break;
	case 1: wr.opcode = IBV_WR_RDMA_WRITE; break;
	case 2: wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM; wr.imm_data = htonl(imm); break;
	case 3: wr.opcode = IBV_WR_RDMA_READ; break;
	default: return EINVAL;
	}
	if (op != 0) {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	return ibv_post_send(qp, &wr, &bad);
}

static int goccl_post_recv(struct ibv_qp *qp, uint64_t wrid, uintptr_t addr, uint32_t len, uint32_t lkey) {
	struct ibv_sge sge;
	struct ibv_recv_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof wr);
	sge.addr = (uint64_t)addr;
	sge.length = len;
	sge.lkey = lkey;
	wr.wr_id = wrid;
	if (len > 0) {
		wr.sg_list = &sge;
		wr.num_sge = 1;
	}
	return ibv_post_recv(qp, &wr, &bad);
}
*/
import "C"

import (
	"fmt"
	"syscall"
	"unsafe"
)

// Available reports whether this build calls libibverbs.
const Available = true

// Open returns the libibverbs library.
func Open() (Lib, error) { return lib{}, nil }

// StatusString names a work completion status (ibv_wc_status_str).
func StatusString(status uint32) string {
	return C.GoString(C.ibv_wc_status_str(C.enum_ibv_wc_status(status)))
}

func errnoErr(call string, rc C.int, err error) error {
	if rc > 0 {
		return fmt.Errorf("%s: %w", call, syscall.Errno(rc))
	}
	if rc < 0 {
		return fmt.Errorf("%s: %w", call, syscall.Errno(-rc))
	}
	if err == nil {
		err = syscall.EIO
	}
	return fmt.Errorf("%s: %w", call, err)
}

type lib struct{}

func (lib) DeviceNames() ([]string, error) {
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		return nil, errnoErr("ibv_get_device_list", 0, err)
	}
	defer C.ibv_free_device_list(list)
	devs := unsafe.Slice(list, int(n))
	names := make([]string, 0, len(devs))
	for _, d := range devs {
		names = append(names, C.GoString(C.ibv_get_device_name(d)))
	}
	return names, nil
}

func (lib) Open(name string) (Context, error) {
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		return nil, errnoErr("ibv_get_device_list", 0, err)
	}
	defer C.ibv_free_device_list(list)
	for _, d := range unsafe.Slice(list, int(n)) {
		if C.GoString(C.ibv_get_device_name(d)) != name {
			continue
		}
		ctx, err := C.ibv_open_device(d)
		if ctx == nil {
			return nil, errnoErr("ibv_open_device "+name, 0, err)
		}
		return &context{ctx: ctx, name: name}, nil
	}
	return nil, fmt.Errorf("ibv_open_device %s: %w", name, syscall.ENODEV)
}

type context struct {
	ctx  *C.struct_ibv_context
	name string
}

func (c *context) Name() string { return c.name }

func (c *context) QueryDevice() (DeviceAttr, error) {
	var a C.struct_ibv_device_attr
	if rc, err := C.ibv_query_device(c.ctx, &a); rc != 0 {
		return DeviceAttr{}, errnoErr("ibv_query_device", rc, err)
	}
	return DeviceAttr{
		PhysPortCnt: int(a.phys_port_cnt),
		MaxQPWR:     int(a.max_qp_wr),
		MaxCQE:      int(a.max_cqe),
		MaxSGE:      int(a.max_sge),
		MaxQPRdAtom: int(a.max_qp_rd_atom),
		MaxMRSize:   uint64(a.max_mr_size),
	}, nil
}

func (c *context) QueryPort(port int) (PortAttr, error) {
	var a C.struct_ibv_port_attr
	if rc, err := C.goccl_query_port(c.ctx, C.int(port), &a); rc != 0 {
		return PortAttr{}, errnoErr(fmt.Sprintf("ibv_query_port %s:%d", c.name, port), rc, err)
	}
	return PortAttr{
		State:       int(a.state),
		MaxMTU:      MTUBytes(int(a.max_mtu)),
		ActiveMTU:   MTUBytes(int(a.active_mtu)),
		LID:         uint16(a.lid),
		LinkLayer:   int(a.link_layer),
		GIDTableLen: int(a.gid_tbl_len),
	}, nil
}

func (c *context) QueryGID(port, index int) (GIDEntry, error) {
	var g [16]C.uint8_t
	var t C.int
	if rc, err := C.goccl_query_gid(c.ctx, C.int(port), C.int(index), &g[0], &t); rc != 0 {
		return GIDEntry{}, errnoErr(fmt.Sprintf("ibv_query_gid %s:%d[%d]", c.name, port, index), rc, err)
	}
	e := GIDEntry{Index: index}
	for i := range g {
		e.GID[i] = byte(g[i])
	}
	switch t {
	case C.IBV_GID_TYPE_IB:
		e.Type = GIDTypeIB
	case C.IBV_GID_TYPE_ROCE_V1:
		e.Type = GIDTypeRoCEv1
	default:
		e.Type = GIDTypeRoCEv2
	}
	return e, nil
}

func (c *context) AllocPD() (PD, error) {
	pd, err := C.ibv_alloc_pd(c.ctx)
	if pd == nil {
		return nil, errnoErr("ibv_alloc_pd", 0, err)
	}
	return &pdT{pd: pd}, nil
}

func (c *context) NewCQ(depth int) (CQ, error) {
	q := &cq{c: (*C.struct_goccl_cq)(C.calloc(1, C.sizeof_struct_goccl_cq))}
	if rc := C.goccl_create_cq(c.ctx, C.int(depth), q.c); rc != 0 {
		C.free(unsafe.Pointer(q.c))
		return nil, errnoErr("ibv_create_cq", rc, nil)
	}
	return q, nil
}

func (c *context) Close() error {
	if rc, err := C.ibv_close_device(c.ctx); rc != 0 {
		return errnoErr("ibv_close_device", rc, err)
	}
	return nil
}

type pdT struct{ pd *C.struct_ibv_pd }

func (p *pdT) RegMR(addr uintptr, n int, access Access) (MR, error) {
	mr, err := C.goccl_reg_mr(p.pd, C.uintptr_t(addr), C.size_t(n), C.int(access))
	if mr == nil {
		return nil, errnoErr(fmt.Sprintf("ibv_reg_mr(%d bytes)", n), 0, err)
	}
	return &mrT{mr: mr}, nil
}

func (p *pdT) NewQP(q CQ, maxSend, maxRecv, maxInline int) (QP, error) {
	var got C.int
	qp, err := C.goccl_create_qp(p.pd, q.(*cq).c.cq, C.int(maxSend), C.int(maxRecv), C.int(maxInline), &got)
	if qp == nil {
		return nil, errnoErr("ibv_create_qp", 0, err)
	}
	return &qpT{qp: qp, inline: int(got)}, nil
}

func (p *pdT) Close() error {
	if rc, err := C.ibv_dealloc_pd(p.pd); rc != 0 {
		return errnoErr("ibv_dealloc_pd", rc, err)
	}
	return nil
}

type mrT struct{ mr *C.struct_ibv_mr }

func (m *mrT) LKey() uint32 { return uint32(m.mr.lkey) }
func (m *mrT) RKey() uint32 { return uint32(m.mr.rkey) }
func (m *mrT) Dereg() error {
	if rc, err := C.ibv_dereg_mr(m.mr); rc != 0 {
		return errnoErr("ibv_dereg_mr", rc, err)
	}
	return nil
}

type cq struct {
	c  *C.struct_goccl_cq
	wc [32]C.struct_goccl_wc
}

// Poll is not safe for concurrent use; the caller serialises it.
func (q *cq) Poll(out []WC) (int, error) {
	n := len(out)
	if n > len(q.wc) {
		n = len(q.wc)
	}
	if n == 0 {
		return 0, nil
	}
	got := int(C.goccl_poll(q.c.cq, &q.wc[0], C.int(n)))
	if got < 0 {
		return 0, fmt.Errorf("ibv_poll_cq: %d", got)
	}
	for i := 0; i < got; i++ {
		w := &q.wc[i]
		out[i] = WC{
			WRID:      uint64(w.wr_id),
			Status:    uint32(w.status),
			Opcode:    uint32(w.opcode),
			ByteLen:   uint32(w.byte_len),
			Imm:       uint32(w.imm),
			QPNum:     uint32(w.qp_num),
			VendorErr: uint32(w.vendor_err),
			HasImm:    w.has_imm != 0,
		}
	}
	return got, nil
}

func (q *cq) Fd() int { return int(q.c.ch.fd) }

func (q *cq) ConsumeEvent() (bool, error) {
	rc := C.goccl_cq_event(q.c)
	if rc < 0 {
		return false, errnoErr("ibv_get_cq_event", rc, nil)
	}
	return rc == 1, nil
}

func (q *cq) Close() error {
	var first error
	if rc, err := C.ibv_destroy_cq(q.c.cq); rc != 0 {
		first = errnoErr("ibv_destroy_cq", rc, err)
	}
	if rc, err := C.ibv_destroy_comp_channel(q.c.ch); rc != 0 && first == nil {
		first = errnoErr("ibv_destroy_comp_channel", rc, err)
	}
	C.free(unsafe.Pointer(q.c))
	return first
}

type qpT struct {
	qp     *C.struct_ibv_qp
	inline int
}

func (q *qpT) Num() uint32    { return uint32(q.qp.qp_num) }
func (q *qpT) MaxInline() int { return q.inline }

func (q *qpT) Init(port int, access Access) error {
	if rc := C.goccl_qp_init(q.qp, C.int(port), C.int(access)); rc != 0 {
		return errnoErr("ibv_modify_qp(INIT)", rc, nil)
	}
	return nil
}

func (q *qpT) RTR(a RTRAttr) error {
	var g [16]C.uint8_t
	for i := range g {
		g[i] = C.uint8_t(a.DGID[i])
	}
	global := 0
	if a.Global {
		global = 1
	}
	rc := C.goccl_qp_rtr(q.qp, C.int(a.Port), C.uint32_t(a.DestQPN), C.uint32_t(a.RQPSN), &g[0],
		C.int(a.SGIDIndex), C.uint16_t(a.DLID), C.int(global), C.int(MTUEnum(a.MTU)), C.int(a.MaxRdAtom))
	if rc != 0 {
		return errnoErr("ibv_modify_qp(RTR)", rc, nil)
	}
	return nil
}

func (q *qpT) RTS(a RTSAttr) error {
	rc := C.goccl_qp_rts(q.qp, C.uint32_t(a.SQPSN), C.int(a.Timeout), C.int(a.RetryCnt), C.int(a.RNRRetry), C.int(a.MaxRdAtom))
	if rc != 0 {
		return errnoErr("ibv_modify_qp(RTS)", rc, nil)
	}
	return nil
}

func (q *qpT) SetError() error {
	if rc := C.goccl_qp_error(q.qp); rc != 0 {
		return errnoErr("ibv_modify_qp(ERR)", rc, nil)
	}
	return nil
}

func (q *qpT) PostSend(wr SendWR) error {
	inl := 0
	if wr.Inline {
		inl = 1
	}
	rc := C.goccl_post_send(q.qp, C.uint64_t(wr.WRID), C.int(wr.Op), C.uintptr_t(wr.Addr), C.uint32_t(wr.Len),
		C.uint32_t(wr.LKey), C.uint64_t(wr.RemoteAddr), C.uint32_t(wr.RKey), C.uint32_t(wr.Imm), C.int(inl))
	if rc != 0 {
		return errnoErr("ibv_post_send", rc, nil)
	}
	return nil
}

func (q *qpT) PostRecv(wrid uint64, addr uintptr, n int, lkey uint32) error {
	rc := C.goccl_post_recv(q.qp, C.uint64_t(wrid), C.uintptr_t(addr), C.uint32_t(n), C.uint32_t(lkey))
	if rc != 0 {
		return errnoErr("ibv_post_recv", rc, nil)
	}
	return nil
}

func (q *qpT) Close() error {
	if rc, err := C.ibv_destroy_qp(q.qp); rc != 0 {
		return errnoErr("ibv_destroy_qp", rc, err)
	}
	return nil
}
