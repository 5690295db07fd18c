/*
 * pair.h: what the C probes of `cargo xtask bench` (postpoll.c,
 * floor_mlx5.c) share to set up: opening the device and connecting an RC
 * QP to its peer on the same port (INIT, RTR, RTS). Test-only. The
 * including file defines PAIR_PROG, its name in error messages.
 */
#ifndef PAIR_H
#define PAIR_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

static void die(const char *what, int err)
{
	fprintf(stderr, "%s: %s: %s\n", PAIR_PROG, what, strerror(err));
	exit(1);
}

/* The device named `dev`, opened; exits if there is none. */
static struct ibv_context *open_named(const char *dev)
{
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	int n, k;

	list = ibv_get_device_list(&n);
	if (!list)
		die("ibv_get_device_list", errno);
	for (k = 0; k < n && !ctx; k++)
		if (!strcmp(ibv_get_device_name(list[k]), dev))
			ctx = ibv_open_device(list[k]);
	ibv_free_device_list(list);
	if (!ctx) {
		fprintf(stderr, "%s: cannot open %s\n", PAIR_PROG, dev);
		exit(1);
	}
	return ctx;
}

/* Moves `qp` to RTS, connected to QP `remote_qpn` on the same port
 * (port 1, GID `gid` at `gid_index`); exits on failure. */
static void connect_qp(struct ibv_qp *qp, uint32_t remote_qpn,
		       uint32_t my_psn, uint32_t remote_psn,
		       const union ibv_gid *gid, int gid_index)
{
	struct ibv_qp_attr a;
	int rc;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			    IBV_ACCESS_REMOTE_READ;
	rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
			   IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	if (rc)
		die("modify to INIT", rc);

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = remote_qpn;
	a.rq_psn = remote_psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.sgid_index = gid_index;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			   IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	if (rc)
		die("modify to RTR", rc);

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = my_psn;
	a.max_rd_atomic = 1;
	rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
			   IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
			   IBV_QP_MAX_QP_RD_ATOMIC);
	if (rc)
		die("modify to RTS", rc);
}

/* A zeroed, page-aligned 4 KiB buffer, registered on `pd` for local
 * write and remote read and write; exits on failure. */
static void pair_buffer(struct ibv_pd *pd, uint8_t **buf, struct ibv_mr **mr)
{
	int rc = posix_memalign((void **)buf, 4096, 4096);

	if (rc)
		die("posix_memalign", rc);
	memset(*buf, 0, 4096);
	*mr = ibv_reg_mr(pd, *buf, 4096,
			 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				 IBV_ACCESS_REMOTE_READ);
	if (!*mr)
		die("ibv_reg_mr", errno);
}

/* The probes' RC QP: `depth` send and receive requests of one gather
 * entry each, both completing on `cq`, no inline data. */
static void pair_qp_attr(struct ibv_qp_init_attr *qa, struct ibv_cq *cq,
			 uint32_t depth)
{
	memset(qa, 0, sizeof(*qa));
	qa->send_cq = cq;
	qa->recv_cq = cq;
	qa->qp_type = IBV_QPT_RC;
	qa->cap.max_send_wr = depth;
	qa->cap.max_recv_wr = depth;
	qa->cap.max_send_sge = 1;
	qa->cap.max_recv_sge = 1;
}

/* The probes' modes: send, recv, write32 or batch32 (both post 32 RDMA
 * WRITEs), with a positive ITERS. Sets the three flags; 0, with a message,
 * for anything else. */
static int pair_mode(const char *mode, long iters, int *is_send, int *is_recv,
		     int *is_write)
{
	*is_send = !strcmp(mode, "send");
	*is_recv = !strcmp(mode, "recv");
	*is_write = !strcmp(mode, "write32") || !strcmp(mode, "batch32");
	if (!(*is_send || *is_recv || *is_write) || iters <= 0) {
		fprintf(stderr, "%s: bad mode or ITERS\n", PAIR_PROG);
		return 0;
	}
	return 1;
}

/* Connects the probes' two QPs, `a` and `b`, to each other over GID
 * `gid_index` of port 1 (PSNs 100 and 200). */
static void connect_pair(struct ibv_context *ctx, struct ibv_qp *a,
			 struct ibv_qp *b, int gid_index)
{
	union ibv_gid gid;
	int rc = ibv_query_gid(ctx, 1, gid_index, &gid);

	if (rc)
		die("ibv_query_gid", rc);
	connect_qp(a, b->qp_num, 100, 200, &gid, gid_index);
	connect_qp(b, a->qp_num, 200, 100, &gid, gid_index);
}

/* The one gather entry of a probe's message: `len` bytes at `buf`. */
static void pair_sge(struct ibv_sge *sge, const void *buf, uint32_t len,
		     uint32_t lkey)
{
	sge->addr = (uintptr_t)buf;
	sge->length = len;
	sge->lkey = lkey;
}

/* The probes' messages: a signaled SEND of `len` bytes at `buf` (wr_id 1)
 * and the receive for it (wr_id 2), each with its one gather entry. */
static void pair_send_wr(struct ibv_send_wr *wr, struct ibv_sge *sge,
			 const void *buf, uint32_t len, uint32_t lkey)
{
	pair_sge(sge, buf, len, lkey);
	memset(wr, 0, sizeof(*wr));
	wr->wr_id = 1;
	wr->sg_list = sge;
	wr->num_sge = 1;
	wr->opcode = IBV_WR_SEND;
	wr->send_flags = IBV_SEND_SIGNALED;
}

static void pair_recv_wr(struct ibv_recv_wr *wr, struct ibv_sge *sge,
			 void *buf, uint32_t len, uint32_t lkey)
{
	pair_sge(sge, buf, len, lkey);
	memset(wr, 0, sizeof(*wr));
	wr->wr_id = 2;
	wr->sg_list = sge;
	wr->num_sge = 1;
}

#endif
