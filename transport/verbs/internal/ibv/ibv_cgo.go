//go:build cgo && linux && !goccl_noverbs

package ibv

/*
#cgo CFLAGS: -Werror=implicit-function-declaration
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE // dlvsym
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include "ibv_abi.h"

// The libibverbs entry points goccl calls, resolved at run time.
static struct {
	struct gibv_device **(*get_device_list)(int *num);
	void (*free_device_list)(struct gibv_device **list);
	const char *(*get_device_name)(struct gibv_device *dev);
	struct gibv_context *(*open_device)(struct gibv_device *dev);
	int (*close_device)(struct gibv_context *ctx);
	int (*query_device)(struct gibv_context *ctx, struct gibv_device_attr *attr);
	int (*query_port)(struct gibv_context *ctx, uint8_t port, struct gibv_port_attr *attr);
	int (*query_gid)(struct gibv_context *ctx, uint8_t port, int index, union gibv_gid *gid);
	int (*query_gid_ex)(struct gibv_context *ctx, uint32_t port, uint32_t index, struct gibv_gid_entry *e, uint32_t flags, size_t size);
	struct gibv_pd *(*alloc_pd)(struct gibv_context *ctx);
	int (*dealloc_pd)(struct gibv_pd *pd);
	struct gibv_mr *(*reg_mr)(struct gibv_pd *pd, void *addr, size_t n, int access);
	int (*dereg_mr)(struct gibv_mr *mr);
	struct gibv_comp_channel *(*create_comp_channel)(struct gibv_context *ctx);
	int (*destroy_comp_channel)(struct gibv_comp_channel *ch);
	struct gibv_cq *(*create_cq)(struct gibv_context *ctx, int cqe, void *cq_context, struct gibv_comp_channel *ch, int vector);
	int (*destroy_cq)(struct gibv_cq *cq);
	int (*get_cq_event)(struct gibv_comp_channel *ch, struct gibv_cq **cq, void **cq_context);
	void (*ack_cq_events)(struct gibv_cq *cq, unsigned int n);
	struct gibv_qp *(*create_qp)(struct gibv_pd *pd, struct gibv_qp_init_attr *attr);
	int (*destroy_qp)(struct gibv_qp *qp);
	int (*modify_qp)(struct gibv_qp *qp, struct gibv_qp_attr *attr, int mask);
	const char *(*wc_status_str)(int status);
} goccl_ibv;

// goccl_sym resolves name at version (dlvsym: libibverbs exports both the
// IBVERBS_1.0 compatibility and the 1.1 entry points of several verbs
// under one name), falling back to the default version.
static void *goccl_sym(void *h, const char *name, const char *version) {
	void *p = dlvsym(h, name, version);
	if (!p) p = dlsym(h, name);
	return p;
}

// goccl_ibv_load opens libibverbs.so.1 and resolves every entry point. On
// failure it returns -1 with the reason in err.
static int goccl_ibv_load(char *err, size_t errlen) {
	void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return -1;
	}
#define SYM(field, name, version) \
	if (!(*(void **)&goccl_ibv.field = goccl_sym(h, name, version))) { \
		snprintf(err, errlen, "libibverbs.so.1 has no %s@%s", name, version); \
		dlclose(h); \
		return -1; \
	}
	SYM(get_device_list, "ibv_get_device_list", "IBVERBS_1.1");
	SYM(free_device_list, "ibv_free_device_list", "IBVERBS_1.1");
	SYM(get_device_name, "ibv_get_device_name", "IBVERBS_1.1");
	SYM(open_device, "ibv_open_device", "IBVERBS_1.1");
	SYM(close_device, "ibv_close_device", "IBVERBS_1.1");
	SYM(query_device, "ibv_query_device", "IBVERBS_1.1");
	SYM(query_port, "ibv_query_port", "IBVERBS_1.1");
	SYM(query_gid, "ibv_query_gid", "IBVERBS_1.1");
	SYM(alloc_pd, "ibv_alloc_pd", "IBVERBS_1.1");
	SYM(dealloc_pd, "ibv_dealloc_pd", "IBVERBS_1.1");
	SYM(reg_mr, "ibv_reg_mr", "IBVERBS_1.1");
	SYM(dereg_mr, "ibv_dereg_mr", "IBVERBS_1.1");
	SYM(create_comp_channel, "ibv_create_comp_channel", "IBVERBS_1.0");
	SYM(destroy_comp_channel, "ibv_destroy_comp_channel", "IBVERBS_1.0");
	SYM(create_cq, "ibv_create_cq", "IBVERBS_1.1");
	SYM(destroy_cq, "ibv_destroy_cq", "IBVERBS_1.1");
	SYM(get_cq_event, "ibv_get_cq_event", "IBVERBS_1.1");
	SYM(ack_cq_events, "ibv_ack_cq_events", "IBVERBS_1.1");
	SYM(create_qp, "ibv_create_qp", "IBVERBS_1.1");
	SYM(destroy_qp, "ibv_destroy_qp", "IBVERBS_1.1");
	SYM(modify_qp, "ibv_modify_qp", "IBVERBS_1.1");
	SYM(wc_status_str, "ibv_wc_status_str", "IBVERBS_1.1");
#undef SYM
	// Optional (rdma-core 32 and later): the GID type. Without it the
	// caller assumes RoCE v2 on Ethernet ports.
	*(void **)&goccl_ibv.query_gid_ex = dlvsym(h, "_ibv_query_gid_ex", "IBVERBS_1.11");
	return 0;
}

static struct gibv_device **goccl_get_device_list(int *n) { return goccl_ibv.get_device_list(n); }
static void goccl_free_device_list(struct gibv_device **l) { goccl_ibv.free_device_list(l); }
static const char *goccl_get_device_name(struct gibv_device *d) { return goccl_ibv.get_device_name(d); }
static struct gibv_context *goccl_open_device(struct gibv_device *d) { return goccl_ibv.open_device(d); }
static int goccl_close_device(struct gibv_context *c) { return goccl_ibv.close_device(c); }
static int goccl_query_device(struct gibv_context *c, struct gibv_device_attr *a) { return goccl_ibv.query_device(c, a); }
static struct gibv_pd *goccl_alloc_pd(struct gibv_context *c) { return goccl_ibv.alloc_pd(c); }
static int goccl_dealloc_pd(struct gibv_pd *pd) { return goccl_ibv.dealloc_pd(pd); }
static int goccl_dereg_mr(struct gibv_mr *mr) { return goccl_ibv.dereg_mr(mr); }
static int goccl_destroy_qp(struct gibv_qp *qp) { return goccl_ibv.destroy_qp(qp); }
static const char *goccl_wc_status_str(int s) { return goccl_ibv.wc_status_str(s); }

static int goccl_query_port(struct gibv_context *ctx, int port, struct gibv_port_attr *a) {
	memset(a, 0, sizeof *a);
	return goccl_ibv.query_port(ctx, (uint8_t)port, a);
}

static struct gibv_mr *goccl_reg_mr(struct gibv_pd *pd, uintptr_t addr, size_t n, int access) {
	return goccl_ibv.reg_mr(pd, (void *)addr, n, access);
}

// goccl_query_gid returns the GID and its type (-1 if the library cannot
// tell).
static int goccl_query_gid(struct gibv_context *ctx, int port, int index, uint8_t *gid, int *type) {
	int rc = 0;
	if (goccl_ibv.query_gid_ex) {
		struct gibv_gid_entry e;
		memset(&e, 0, sizeof e);
		rc = goccl_ibv.query_gid_ex(ctx, (uint32_t)port, (uint32_t)index, &e, 0, sizeof e);
		if (rc == 0) {
			memcpy(gid, e.gid.raw, 16);
			*type = (int)e.gid_type;
			return 0;
		}
	}
	union gibv_gid g;
	if (goccl_ibv.query_gid(ctx, (uint8_t)port, index, &g) != 0) {
		return rc ? rc : (errno ? errno : EIO);
	}
	memcpy(gid, g.raw, 16);
	*type = -1;
	return 0;
}

struct goccl_cq {
	struct gibv_context *ctx;
	struct gibv_cq *cq;
	struct gibv_comp_channel *ch;
};

static int goccl_req_notify(struct goccl_cq *c) {
	return c->ctx->ops.req_notify_cq(c->cq, 0);
}

static int goccl_create_cq(struct gibv_context *ctx, int depth, struct goccl_cq *out) {
	out->ctx = ctx;
	out->ch = goccl_ibv.create_comp_channel(ctx);
	if (!out->ch) return errno ? errno : EIO;
	int fl = fcntl(out->ch->fd, F_GETFL);
	if (fl < 0 || fcntl(out->ch->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		int e = errno;
		goccl_ibv.destroy_comp_channel(out->ch);
		return e;
	}
	out->cq = goccl_ibv.create_cq(ctx, depth, NULL, out->ch, 0);
	if (!out->cq) {
		int e = errno ? errno : EIO;
		goccl_ibv.destroy_comp_channel(out->ch);
		return e;
	}
	int rc = goccl_req_notify(out);
	if (rc) {
		goccl_ibv.destroy_cq(out->cq);
		goccl_ibv.destroy_comp_channel(out->ch);
		return rc;
	}
	return 0;
}

static int goccl_destroy_cq(struct goccl_cq *c) {
	int rc = goccl_ibv.destroy_cq(c->cq);
	int rc2 = goccl_ibv.destroy_comp_channel(c->ch);
	return rc ? rc : rc2;
}

// goccl_cq_event returns 1 if an event was consumed (acknowledged, queue
// re-armed), 0 if none was pending, or a negative errno.
static int goccl_cq_event(struct goccl_cq *c) {
	struct gibv_cq *cq;
	void *cqctx;
	if (goccl_ibv.get_cq_event(c->ch, &cq, &cqctx) != 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
		return -(errno ? errno : EIO);
	}
	goccl_ibv.ack_cq_events(cq, 1);
	int rc = goccl_req_notify(c);
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

// goccl_poll is ibv_poll_cq (an inline verb: the provider's ops.poll_cq).
static int goccl_poll(struct goccl_cq *c, struct goccl_wc *out, int n) {
	struct gibv_wc wc[32];
	if (n > 32) n = 32;
	int got = c->ctx->ops.poll_cq(c->cq, n, wc);
	for (int i = 0; i < got; i++) {
		out[i].wr_id = wc[i].wr_id;
		out[i].status = (uint32_t)wc[i].status;
		out[i].opcode = (uint32_t)wc[i].opcode;
		out[i].byte_len = wc[i].byte_len;
		out[i].has_imm = (wc[i].wc_flags & GIBV_WC_WITH_IMM) != 0;
		out[i].imm = out[i].has_imm ? ntohl(wc[i].imm_data) : 0;
		out[i].qp_num = wc[i].qp_num;
		out[i].vendor_err = wc[i].vendor_err;
	}
	return got;
}

static struct gibv_qp *goccl_create_qp(struct gibv_pd *pd, struct goccl_cq *cq, int max_send, int max_recv, int max_inline, int *got_inline) {
	struct gibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.send_cq = cq->cq;
	a.recv_cq = cq->cq;
	a.qp_type = GIBV_QPT_RC;
	a.sq_sig_all = 1;
	a.cap.max_send_wr = max_send;
	a.cap.max_recv_wr = max_recv;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	a.cap.max_inline_data = max_inline;
	struct gibv_qp *qp = goccl_ibv.create_qp(pd, &a);
	if (!qp && max_inline > 0) {
		a.cap.max_inline_data = 0;
		qp = goccl_ibv.create_qp(pd, &a);
	}
	if (qp) *got_inline = a.cap.max_inline_data;
	return qp;
}

static int goccl_qp_init(struct gibv_qp *qp, int port, int access) {
	struct gibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = GIBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = (uint8_t)port;
	a.qp_access_flags = access;
	return goccl_ibv.modify_qp(qp, &a, GIBV_QP_STATE | GIBV_QP_PKEY_INDEX | GIBV_QP_PORT | GIBV_QP_ACCESS_FLAGS);
}

static int goccl_qp_rtr(struct gibv_qp *qp, int port, uint32_t dqpn, uint32_t rq_psn, const uint8_t *dgid,
		int sgid_index, uint16_t dlid, int global, int mtu, int max_rd_atom) {
	struct gibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = GIBV_QPS_RTR;
	a.path_mtu = mtu;
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
	return goccl_ibv.modify_qp(qp, &a, GIBV_QP_STATE | GIBV_QP_AV | GIBV_QP_PATH_MTU | GIBV_QP_DEST_QPN |
		GIBV_QP_RQ_PSN | GIBV_QP_MAX_DEST_RD_ATOMIC | GIBV_QP_MIN_RNR_TIMER);
}

static int goccl_qp_rts(struct gibv_qp *qp, uint32_t sq_psn, int timeout, int retry, int rnr_retry, int max_rd_atom) {
	struct gibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = GIBV_QPS_RTS;
	a.timeout = (uint8_t)timeout;
	a.retry_cnt = (uint8_t)retry;
	a.rnr_retry = (uint8_t)rnr_retry;
	a.sq_psn = sq_psn;
	a.max_rd_atomic = (uint8_t)max_rd_atom;
	return goccl_ibv.modify_qp(qp, &a, GIBV_QP_STATE | GIBV_QP_TIMEOUT | GIBV_QP_RETRY_CNT | GIBV_QP_RNR_RETRY |
		GIBV_QP_SQ_PSN | GIBV_QP_MAX_QP_RD_ATOMIC);
}

static int goccl_qp_error(struct gibv_qp *qp) {
	struct gibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = GIBV_QPS_ERR;
	return goccl_ibv.modify_qp(qp, &a, GIBV_QP_STATE);
}

// goccl_post_send is ibv_post_send (an inline verb: the provider's
// ops.post_send), with the work request built here: its wr is a union.
static int goccl_post_send(struct gibv_qp *qp, uint64_t wrid, int op, uintptr_t addr, uint32_t len, uint32_t lkey,
		uint64_t raddr, uint32_t rkey, uint32_t imm, int inl) {
	struct gibv_sge sge;
	struct gibv_send_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof wr);
	sge.addr = (uint64_t)addr;
	sge.length = len;
	sge.lkey = lkey;
	wr.wr_id = wrid;
	if (len > 0) {
		wr.sg_list = &sge;
		wr.num_sge = 1;
	}
	wr.send_flags = GIBV_SEND_SIGNALED | (inl && len > 0 ? GIBV_SEND_INLINE : 0);
	switch (op) {
	case 0: wr.opcode = GIBV_WR_SEND; break;
	case 1: wr.opcode = GIBV_WR_RDMA_WRITE; break;
	case 2: wr.opcode = GIBV_WR_RDMA_WRITE_WITH_IMM; wr.imm_data = htonl(imm); break;
	case 3: wr.opcode = GIBV_WR_RDMA_READ; break;
	default: return EINVAL;
	}
	if (op != 0) {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	return qp->context->ops.post_send(qp, &wr, &bad);
}

// goccl_post_recv is ibv_post_recv (the provider's ops.post_recv).
static int goccl_post_recv(struct gibv_qp *qp, uint64_t wrid, uintptr_t addr, uint32_t len, uint32_t lkey) {
	struct gibv_sge sge;
	struct gibv_recv_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof wr);
	sge.addr = (uint64_t)addr;
	sge.length = len;
	sge.lkey = lkey;
	wr.wr_id = wrid;
	if (len > 0) {
		wr.sg_list = &sge;
		wr.num_sge = 1;
	}
	return qp->context->ops.post_recv(qp, &wr, &bad);
}
*/
import "C"

import (
	"fmt"
	"sync"
	"syscall"
	"unsafe"

	"github.com/goccl/goccl/transport"
)

// Available reports whether this build can call libibverbs: it loads
// libibverbs.so.1 at run time (Open), so it needs neither rdma-core's
// headers to build nor the library to start.
const Available = true

var load struct {
	once sync.Once
	err  error
}

// Open loads libibverbs.so.1 (once per process) and returns it. Without the
// library, or with one that lacks an entry point goccl needs, the error
// wraps transport.ErrNotSupported and says why.
func Open() (Lib, error) {
	load.once.Do(func() {
		var msg [512]C.char
		if C.goccl_ibv_load(&msg[0], C.size_t(len(msg))) != 0 {
			load.err = fmt.Errorf("libibverbs.so.1 not loaded (%s; install rdma-core's libibverbs1 and a provider such as ibverbs-providers): %w",
				C.GoString(&msg[0]), transport.ErrNotSupported)
		}
	})
	if load.err != nil {
		return nil, load.err
	}
	return lib{}, nil
}

// libraryStatusString is libibverbs' own ibv_wc_status_str, for the test
// that checks StatusString against it; ok is false without the library.
func libraryStatusString(status uint32) (s string, ok bool) {
	if _, err := Open(); err != nil {
		return "", false
	}
	return C.GoString(C.goccl_wc_status_str(C.int(status))), true
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
	list, err := C.goccl_get_device_list(&n)
	if list == nil {
		return nil, errnoErr("ibv_get_device_list", 0, err)
	}
	defer C.goccl_free_device_list(list)
	devs := unsafe.Slice(list, int(n))
	names := make([]string, 0, len(devs))
	for _, d := range devs {
		names = append(names, C.GoString(C.goccl_get_device_name(d)))
	}
	return names, nil
}

func (lib) Open(name string) (Context, error) {
	var n C.int
	list, err := C.goccl_get_device_list(&n)
	if list == nil {
		return nil, errnoErr("ibv_get_device_list", 0, err)
	}
	defer C.goccl_free_device_list(list)
	for _, d := range unsafe.Slice(list, int(n)) {
		if C.GoString(C.goccl_get_device_name(d)) != name {
			continue
		}
		ctx, err := C.goccl_open_device(d)
		if ctx == nil {
			return nil, errnoErr("ibv_open_device "+name, 0, err)
		}
		return &context{ctx: ctx, name: name}, nil
	}
	return nil, fmt.Errorf("ibv_open_device %s: %w", name, syscall.ENODEV)
}

type context struct {
	ctx  *C.struct_gibv_context
	name string
}

func (c *context) Name() string { return c.name }

func (c *context) QueryDevice() (DeviceAttr, error) {
	var a C.struct_gibv_device_attr
	if rc, err := C.goccl_query_device(c.ctx, &a); rc != 0 {
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
	var a C.struct_gibv_port_attr
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
	case C.GIBV_GID_TYPE_IB:
		e.Type = GIDTypeIB
	case C.GIBV_GID_TYPE_ROCE_V1:
		e.Type = GIDTypeRoCEv1
	default:
		e.Type = GIDTypeRoCEv2
	}
	return e, nil
}

func (c *context) AllocPD() (PD, error) {
	pd, err := C.goccl_alloc_pd(c.ctx)
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
	if rc, err := C.goccl_close_device(c.ctx); rc != 0 {
		return errnoErr("ibv_close_device", rc, err)
	}
	return nil
}

type pdT struct{ pd *C.struct_gibv_pd }

func (p *pdT) RegMR(addr uintptr, n int, access Access) (MR, error) {
	mr, err := C.goccl_reg_mr(p.pd, C.uintptr_t(addr), C.size_t(n), C.int(access))
	if mr == nil {
		return nil, errnoErr(fmt.Sprintf("ibv_reg_mr(%d bytes)", n), 0, err)
	}
	return &mrT{mr: mr}, nil
}

func (p *pdT) NewQP(q CQ, maxSend, maxRecv, maxInline int) (QP, error) {
	var got C.int
	qp, err := C.goccl_create_qp(p.pd, q.(*cq).c, C.int(maxSend), C.int(maxRecv), C.int(maxInline), &got)
	if qp == nil {
		return nil, errnoErr("ibv_create_qp", 0, err)
	}
	return &qpT{qp: qp, inline: int(got)}, nil
}

func (p *pdT) Close() error {
	if rc, err := C.goccl_dealloc_pd(p.pd); rc != 0 {
		return errnoErr("ibv_dealloc_pd", rc, err)
	}
	return nil
}

type mrT struct{ mr *C.struct_gibv_mr }

func (m *mrT) LKey() uint32 { return uint32(m.mr.lkey) }
func (m *mrT) RKey() uint32 { return uint32(m.mr.rkey) }
func (m *mrT) Dereg() error {
	if rc, err := C.goccl_dereg_mr(m.mr); rc != 0 {
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
	got := int(C.goccl_poll(q.c, &q.wc[0], C.int(n)))
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
	rc := C.goccl_destroy_cq(q.c)
	C.free(unsafe.Pointer(q.c))
	if rc != 0 {
		return errnoErr("ibv_destroy_cq", rc, nil)
	}
	return nil
}

type qpT struct {
	qp     *C.struct_gibv_qp
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
	if rc, err := C.goccl_destroy_qp(q.qp); rc != 0 {
		return errnoErr("ibv_destroy_qp", rc, err)
	}
	return nil
}
