// goccl's own declarations of the part of libibverbs' binary interface that
// package ibv uses, so that it builds without rdma-core's headers and loads
// libibverbs.so.1 at run time (dlopen), as NCCL does.
//
// Everything here is the stable ABI of libibverbs 1.1 (rdma-core keeps it
// across releases: providers are built against it): the layouts of the
// structs goccl reads or fills, the head of struct ibv_context with its ops
// table (ibv_poll_cq, ibv_req_notify_cq, ibv_post_send and ibv_post_recv
// are inline functions in verbs.h that call through context->ops), and the
// constants. Types are prefixed gibv_ so that the ABI test
// (ibv_abi_test.go) can compile them beside rdma-core's verbs.h and check
// every size and offset against it.
//
// Only pointers to structs whose layout goccl does not need (device,
// protection domain, completion queue, shared receive queue, address
// handle) are passed around; they stay incomplete here.

#ifndef GOCCL_IBV_ABI_H
#define GOCCL_IBV_ABI_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

struct gibv_device;
struct gibv_pd;
struct gibv_cq;
struct gibv_srq;
struct gibv_ah;
struct gibv_context;

// enum ibv_qp_state
#define GIBV_QPS_RESET 0
#define GIBV_QPS_INIT 1
#define GIBV_QPS_RTR 2
#define GIBV_QPS_RTS 3
#define GIBV_QPS_ERR 6

// enum ibv_qp_type
#define GIBV_QPT_RC 2

// enum ibv_qp_attr_mask
#define GIBV_QP_STATE (1 << 0)
#define GIBV_QP_ACCESS_FLAGS (1 << 3)
#define GIBV_QP_PKEY_INDEX (1 << 4)
#define GIBV_QP_PORT (1 << 5)
#define GIBV_QP_AV (1 << 7)
#define GIBV_QP_PATH_MTU (1 << 8)
#define GIBV_QP_TIMEOUT (1 << 9)
#define GIBV_QP_RETRY_CNT (1 << 10)
#define GIBV_QP_RNR_RETRY (1 << 11)
#define GIBV_QP_RQ_PSN (1 << 12)
#define GIBV_QP_MAX_QP_RD_ATOMIC (1 << 13)
#define GIBV_QP_MIN_RNR_TIMER (1 << 15)
#define GIBV_QP_SQ_PSN (1 << 16)
#define GIBV_QP_MAX_DEST_RD_ATOMIC (1 << 17)
#define GIBV_QP_DEST_QPN (1 << 20)

// enum ibv_wr_opcode
#define GIBV_WR_RDMA_WRITE 0
#define GIBV_WR_RDMA_WRITE_WITH_IMM 1
#define GIBV_WR_SEND 2
#define GIBV_WR_RDMA_READ 4

// enum ibv_send_flags
#define GIBV_SEND_SIGNALED (1 << 1)
#define GIBV_SEND_INLINE (1 << 3)

// enum ibv_wc_flags
#define GIBV_WC_WITH_IMM (1 << 1)

// enum ibv_gid_type (of struct ibv_gid_entry)
#define GIBV_GID_TYPE_IB 0
#define GIBV_GID_TYPE_ROCE_V1 1
#define GIBV_GID_TYPE_ROCE_V2 2

struct gibv_device_attr {
	char fw_ver[64];
	uint64_t node_guid;
	uint64_t sys_image_guid;
	uint64_t max_mr_size;
	uint64_t page_size_cap;
	uint32_t vendor_id;
	uint32_t vendor_part_id;
	uint32_t hw_ver;
	int max_qp;
	int max_qp_wr;
	unsigned int device_cap_flags;
	int max_sge;
	int max_sge_rd;
	int max_cq;
	int max_cqe;
	int max_mr;
	int max_pd;
	int max_qp_rd_atom;
	int max_ee_rd_atom;
	int max_res_rd_atom;
	int max_qp_init_rd_atom;
	int max_ee_init_rd_atom;
	int atomic_cap;
	int max_ee;
	int max_rdd;
	int max_mw;
	int max_raw_ipv6_qp;
	int max_raw_ethy_qp;
	int max_mcast_grp;
	int max_mcast_qp_attach;
	int max_total_mcast_qp_attach;
	int max_ah;
	int max_fmr;
	int max_map_per_fmr;
	int max_srq;
	int max_srq_wr;
	int max_srq_sge;
	uint16_t max_pkeys;
	uint8_t local_ca_ack_delay;
	uint8_t phys_port_cnt;
};

// The port attributes as ibv_query_port@IBVERBS_1.1 fills them: it writes
// the fields up to flags (the "compat" layout), and newer libraries never
// write more through it. The tail is room to spare.
struct gibv_port_attr {
	int state;
	int max_mtu;
	int active_mtu;
	int gid_tbl_len;
	uint32_t port_cap_flags;
	uint32_t max_msg_sz;
	uint32_t bad_pkey_cntr;
	uint32_t qkey_viol_cntr;
	uint16_t pkey_tbl_len;
	uint16_t lid;
	uint16_t sm_lid;
	uint8_t lmc;
	uint8_t max_vl_num;
	uint8_t sm_sl;
	uint8_t subnet_timeout;
	uint8_t init_type_reply;
	uint8_t active_width;
	uint8_t active_speed;
	uint8_t phys_state;
	uint8_t link_layer;
	uint8_t flags;
	uint8_t spare[64];
};

union gibv_gid {
	uint8_t raw[16];
	struct {
		uint64_t subnet_prefix;
		uint64_t interface_id;
	} global;
};

struct gibv_gid_entry {
	union gibv_gid gid;
	uint32_t gid_index;
	uint32_t port_num;
	uint32_t gid_type;
	uint32_t ndev_ifindex;
};

struct gibv_comp_channel {
	struct gibv_context *context;
	int fd;
	int refcnt;
};

struct gibv_mr {
	struct gibv_context *context;
	struct gibv_pd *pd;
	void *addr;
	size_t length;
	uint32_t handle;
	uint32_t lkey;
	uint32_t rkey;
};

struct gibv_qp {
	struct gibv_context *context;
	void *qp_context;
	struct gibv_pd *pd;
	struct gibv_cq *send_cq;
	struct gibv_cq *recv_cq;
	struct gibv_srq *srq;
	uint32_t handle;
	uint32_t qp_num;
	int state;
	int qp_type;
	pthread_mutex_t mutex;
	pthread_cond_t cond;
	uint32_t events_completed;
};

struct gibv_wc {
	uint64_t wr_id;
	int status;
	int opcode;
	uint32_t vendor_err;
	uint32_t byte_len;
	uint32_t imm_data; // network byte order
	uint32_t qp_num;
	uint32_t src_qp;
	unsigned int wc_flags;
	uint16_t pkey_index;
	uint16_t slid;
	uint8_t sl;
	uint8_t dlid_path_bits;
};

struct gibv_sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

struct gibv_mw_bind_info {
	struct gibv_mr *mr;
	uint64_t addr;
	uint64_t length;
	unsigned int mw_access_flags;
};

struct gibv_send_wr {
	uint64_t wr_id;
	struct gibv_send_wr *next;
	struct gibv_sge *sg_list;
	int num_sge;
	int opcode;
	unsigned int send_flags;
	uint32_t imm_data; // network byte order
	union {
		struct {
			uint64_t remote_addr;
			uint32_t rkey;
		} rdma;
		struct {
			uint64_t remote_addr;
			uint64_t compare_add;
			uint64_t swap;
			uint32_t rkey;
		} atomic;
		struct {
			struct gibv_ah *ah;
			uint32_t remote_qpn;
			uint32_t remote_qkey;
		} ud;
	} wr;
	union {
		struct {
			uint32_t remote_srqn;
		} xrc;
	} qp_type;
	union {
		struct {
			void *mw;
			uint32_t rkey;
			struct gibv_mw_bind_info bind_info;
		} bind_mw;
		struct {
			void *hdr;
			uint16_t hdr_sz;
			uint16_t mss;
		} tso;
	} ext;
};

struct gibv_recv_wr {
	uint64_t wr_id;
	struct gibv_recv_wr *next;
	struct gibv_sge *sg_list;
	int num_sge;
};

struct gibv_qp_cap {
	uint32_t max_send_wr;
	uint32_t max_recv_wr;
	uint32_t max_send_sge;
	uint32_t max_recv_sge;
	uint32_t max_inline_data;
};

struct gibv_qp_init_attr {
	void *qp_context;
	struct gibv_cq *send_cq;
	struct gibv_cq *recv_cq;
	struct gibv_srq *srq;
	struct gibv_qp_cap cap;
	int qp_type;
	int sq_sig_all;
};

struct gibv_global_route {
	union gibv_gid dgid;
	uint32_t flow_label;
	uint8_t sgid_index;
	uint8_t hop_limit;
	uint8_t traffic_class;
};

struct gibv_ah_attr {
	struct gibv_global_route grh;
	uint16_t dlid;
	uint8_t sl;
	uint8_t src_path_bits;
	uint8_t static_rate;
	uint8_t is_global;
	uint8_t port_num;
};

struct gibv_qp_attr {
	int qp_state;
	int cur_qp_state;
	int path_mtu;
	int path_mig_state;
	uint32_t qkey;
	uint32_t rq_psn;
	uint32_t sq_psn;
	uint32_t dest_qp_num;
	unsigned int qp_access_flags;
	struct gibv_qp_cap cap;
	struct gibv_ah_attr ah_attr;
	struct gibv_ah_attr alt_ah_attr;
	uint16_t pkey_index;
	uint16_t alt_pkey_index;
	uint8_t en_sqd_async_notify;
	uint8_t sq_draining;
	uint8_t max_rd_atomic;
	uint8_t max_dest_rd_atomic;
	uint8_t min_rnr_timer;
	uint8_t port_num;
	uint8_t timeout;
	uint8_t retry_cnt;
	uint8_t rnr_retry;
	uint8_t alt_port_num;
	uint8_t alt_timeout;
	uint32_t rate_limit;
};

// struct ibv_context_ops: the providers' entry points. goccl calls four of
// them (the inline verbs); the others are placeholders of the same size.
struct gibv_context_ops {
	void *compat_query_device;
	void *compat_query_port;
	void *compat_alloc_pd;
	void *compat_dealloc_pd;
	void *compat_reg_mr;
	void *compat_rereg_mr;
	void *compat_dereg_mr;
	void *alloc_mw;
	void *bind_mw;
	void *dealloc_mw;
	void *compat_create_cq;
	int (*poll_cq)(struct gibv_cq *cq, int num_entries, struct gibv_wc *wc);
	int (*req_notify_cq)(struct gibv_cq *cq, int solicited_only);
	void *compat_cq_event;
	void *compat_resize_cq;
	void *compat_destroy_cq;
	void *compat_create_srq;
	void *compat_modify_srq;
	void *compat_query_srq;
	void *compat_destroy_srq;
	void *post_srq_recv;
	void *compat_create_qp;
	void *compat_query_qp;
	void *compat_modify_qp;
	void *compat_destroy_qp;
	int (*post_send)(struct gibv_qp *qp, struct gibv_send_wr *wr, struct gibv_send_wr **bad_wr);
	int (*post_recv)(struct gibv_qp *qp, struct gibv_recv_wr *wr, struct gibv_recv_wr **bad_wr);
	void *compat_create_ah;
	void *compat_destroy_ah;
	void *compat_attach_mcast;
	void *compat_detach_mcast;
	void *compat_async_event;
};

struct gibv_context {
	struct gibv_device *device;
	struct gibv_context_ops ops;
	int cmd_fd;
	int async_fd;
	int num_comp_vectors;
	pthread_mutex_t mutex;
	void *abi_compat;
};

#endif
