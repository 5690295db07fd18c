/*
 * v10.h: the structs of libibverbs' 1.0 ABI (libibverbs 1.0's verbs.h,
 * 2006), which its IBVERBS_1.0 compatibility versions take and return:
 * each object a struct of the old layout, its last member where
 * libibverbs' 1.0 layer keeps the real (1.1) object. No installed header
 * has them; declared here by this project from their layout (the members
 * rdma-core's compat-1_0.c gives them, the types today's verbs.h has),
 * for tests/ibverbs-c/compat_1_0.c and for verbs/ibverbs/tests/layout.rs,
 * which checks the Rust structs of verbs/ibverbs/src/ffi/compat_1_0*.rs
 * against them member by member.
 */
#ifndef RVERBS_V10_H
#define RVERBS_V10_H

#include <stdint.h>
#include <pthread.h>
#include <infiniband/verbs.h>

struct v10_context;
struct v10_cq;
struct v10_srq;
struct v10_qp;

struct v10_device {
	void *obsolete_sysfs_dev, *obsolete_sysfs_ibdev;
	struct ibv_device *real_device;
	void *ops[2];
};

struct v10_recv_wr {
	struct v10_recv_wr *next;
	uint64_t wr_id;
	struct ibv_sge *sg_list;
	int num_sge;
};

struct v10_send_wr {
	struct v10_send_wr *next;
	uint64_t wr_id;
	struct ibv_sge *sg_list;
	int num_sge;
	enum ibv_wr_opcode opcode;
	int send_flags;
	uint32_t imm_data;
	union {
		struct {
			uint64_t remote_addr;
			uint32_t rkey;
		} rdma;
		struct {
			uint64_t remote_addr, compare_add, swap;
			uint32_t rkey;
		} atomic;
		struct {
			void *ah;
			uint32_t remote_qpn, remote_qkey;
		} ud;
	} wr;
};

struct v10_ops {
	void *query_device, *query_port, *alloc_pd, *dealloc_pd, *reg_mr, *dereg_mr, *create_cq;
	int (*poll_cq)(struct v10_cq *cq, int n, struct ibv_wc *wc);
	int (*req_notify_cq)(struct v10_cq *cq, int solicited_only);
	void *cq_event, *resize_cq, *destroy_cq, *create_srq, *modify_srq, *query_srq, *destroy_srq;
	int (*post_srq_recv)(struct v10_srq *srq, struct v10_recv_wr *wr, struct v10_recv_wr **bad);
	void *create_qp, *query_qp, *modify_qp, *destroy_qp;
	int (*post_send)(struct v10_qp *qp, struct v10_send_wr *wr, struct v10_send_wr **bad);
	int (*post_recv)(struct v10_qp *qp, struct v10_recv_wr *wr, struct v10_recv_wr **bad);
	void *create_ah, *destroy_ah, *attach_mcast, *detach_mcast;
};

struct v10_context {
	struct v10_device *device;
	struct v10_ops ops;
	int cmd_fd, async_fd, num_comp_vectors;
	struct ibv_context *real_context;
};

struct v10_pd {
	struct v10_context *context;
	uint32_t handle;
	struct ibv_pd *real_pd;
};

struct v10_mr {
	struct v10_context *context;
	struct v10_pd *pd;
	uint32_t handle, lkey, rkey;
	struct ibv_mr *real_mr;
};

struct v10_cq {
	struct v10_context *context;
	void *cq_context;
	uint32_t handle;
	int cqe;
	pthread_mutex_t mutex;
	pthread_cond_t cond;
	uint32_t comp_events_completed, async_events_completed;
	struct ibv_cq *real_cq;
};

struct v10_srq {
	struct v10_context *context;
	void *srq_context;
	struct v10_pd *pd;
	uint32_t handle;
	pthread_mutex_t mutex;
	pthread_cond_t cond;
	uint32_t events_completed;
	struct ibv_srq *real_srq;
};

struct v10_qp {
	struct v10_context *context;
	void *qp_context;
	struct v10_pd *pd;
	struct v10_cq *send_cq, *recv_cq;
	struct v10_srq *srq;
	uint32_t handle, qp_num;
	enum ibv_qp_state state;
	enum ibv_qp_type qp_type;
	pthread_mutex_t mutex;
	pthread_cond_t cond;
	uint32_t events_completed;
	struct ibv_qp *real_qp;
};

struct v10_qp_init_attr {
	void *qp_context;
	struct v10_cq *send_cq, *recv_cq;
	struct v10_srq *srq;
	struct ibv_qp_cap cap;
	enum ibv_qp_type qp_type;
	int sq_sig_all;
};

struct v10_ah {
	struct v10_context *context;
	struct v10_pd *pd;
	uint32_t handle;
	struct ibv_ah *real_ah;
};

#endif
