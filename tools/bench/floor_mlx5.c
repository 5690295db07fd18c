/*
 * floor_mlx5.c: the hand-written floor of the mlx5 instruction-count rows
 * of `cargo xtask bench` (issue 28; test-only, built into target/bench/,
 * never linked into anything the workspace ships).
 *
 * The set-up is postpoll.c's (two RC QPs on one device connected to each
 * other, through libibverbs + libmlx5); then mlx5dv_init_obj hands over
 * the raw send queue, receive queue, CQs, doorbell records and BlueFlame
 * register, and the measured steps drive them the way a hand-tuned C
 * program does (UCX's rc_mlx5 transport, say), with no other checks than
 * the queue's room and the CQE's owner bit, opcode and QP number:
 *
 *   send     one signaled 64-byte SEND on A: control and data segments,
 *            wr_id, doorbell record, the 64-byte BlueFlame copy; + the CQE
 *            poll that returns its completion (B's receive is re-posted
 *            through libibverbs, unmeasured)
 *   recv     one 64-byte receive on B (data segment, wr_id, doorbell
 *            record) + the CQE poll that returns its completion (A's SEND
 *            goes through libibverbs, unmeasured)
 *   write32  a chain of 32 64-byte RDMA WRITEs on A (control, remote
 *            address and data segments each, the last one signaled), one
 *            doorbell (the record, then the last WQE's first 8 bytes to the
 *            register) + the poll of the one completion
 *   batch32  the same as write32: the floor has one way to post many
 *
 * The formats are mlx5dv.h's (struct mlx5_wqe_ctrl_seg, mlx5_wqe_raddr_seg,
 * mlx5_wqe_data_seg, mlx5_cqe64) and the PRM's. Only the functions named
 * measured_* are counted (callgrind --toggle-collect='*measured_*'); the
 * warm-up rounds run the same code through warm_* twins. Between a post and
 * its poll the program waits, unmeasured, until the CQE is there. At the
 * end it checks that the data arrived and prints `verified=N bytes`.
 *
 * Usage: floor_mlx5 MODE ITERS [DEVICE [GID_INDEX]]   (defaults: mlx5_0, 0)
 */
#include <endian.h>
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#define PAIR_PROG "floor_mlx5.c"
#include "pair.h"

#define MSG 64
#define CHAIN 32
#define DEPTH 64
#define WARMUP 50
/* Room for the wr_ids of the largest queue libmlx5 makes for DEPTH. */
#define WRIDS 1024

/* What a hand-driven send queue keeps. */
struct fsq {
	uint8_t *buf;
	uint32_t wqe_cnt;
	uint32_t head;   /* WQEs posted */
	uint32_t tail;   /* WQEs the device completed */
	uint32_t qpn;
	__be32 *dbrec;
	uint8_t *bf;
	uint32_t bf_size;
	uint32_t bf_off;
	uint64_t wrid[WRIDS];
};

/* A hand-driven receive queue. */
struct frq {
	uint8_t *buf;
	uint32_t wqe_cnt;
	uint32_t stride;
	uint32_t head;
	uint32_t tail;
	__be32 *dbrec;
	uint64_t wrid[WRIDS];
};

/* A hand-polled CQ. */
struct fcq {
	uint8_t *buf;
	uint32_t cqe_cnt;
	uint32_t cqe_size;
	uint32_t ci;
	__be32 *dbrec;
};


#define compiler_barrier() asm volatile("" ::: "memory")

/* The CQ doorbell record's consumer-index word (the PRM's; libmlx5 keeps
 * the name private). */
#define CQ_SET_CI 0

/* The doorbell: record first, then the register (x86: stores are ordered;
 * the BlueFlame writes are flushed with sfence). */
static inline __attribute__((always_inline)) void ring(struct fsq *q,
							const uint8_t *last,
							int copy64)
{
	volatile uint64_t *reg = (volatile uint64_t *)(q->bf + q->bf_off);
	const uint64_t *src = (const uint64_t *)last;

	compiler_barrier();
	q->dbrec[MLX5_SND_DBR] = htobe32(q->head & 0xffff);
	compiler_barrier();
	if (copy64) {
		reg[0] = src[0];
		reg[1] = src[1];
		reg[2] = src[2];
		reg[3] = src[3];
		reg[4] = src[4];
		reg[5] = src[5];
		reg[6] = src[6];
		reg[7] = src[7];
	} else {
		reg[0] = src[0];
	}
	asm volatile("sfence" ::: "memory");
	q->bf_off ^= q->bf_size;
}

static inline __attribute__((always_inline)) int
post_send(struct fsq *q, uint64_t addr, uint32_t lkey, uint64_t wr_id)
{
	uint32_t idx;
	uint8_t *w;
	struct mlx5_wqe_ctrl_seg *c;
	struct mlx5_wqe_data_seg *d;

	if (q->head - q->tail >= q->wqe_cnt)
		return ENOMEM;
	idx = q->head & (q->wqe_cnt - 1);
	w = q->buf + idx * MLX5_SEND_WQE_BB;
	c = (struct mlx5_wqe_ctrl_seg *)w;
	d = (struct mlx5_wqe_data_seg *)(w + sizeof(*c));
	c->opmod_idx_opcode = htobe32((q->head & 0xffff) << 8 | MLX5_OPCODE_SEND);
	c->qpn_ds = htobe32(q->qpn << 8 | 2);
	c->signature = 0;
	c->dci_stream_channel_id = 0;
	c->fm_ce_se = MLX5_WQE_CTRL_CQ_UPDATE;
	c->imm = 0;
	d->byte_count = htobe32(MSG);
	d->lkey = htobe32(lkey);
	d->addr = htobe64(addr);
	q->wrid[idx] = wr_id;
	q->head++;
	ring(q, w, 1);
	return 0;
}

static inline __attribute__((always_inline)) int
post_write_chain(struct fsq *q, uint64_t laddr, uint32_t lkey,
		 uint64_t raddr, uint32_t rkey, uint64_t wr_id)
{
	uint8_t *w = NULL;
	int k;

	if (q->head - q->tail > q->wqe_cnt - CHAIN)
		return ENOMEM;
	for (k = 0; k < CHAIN; k++) {
		uint32_t idx = q->head & (q->wqe_cnt - 1);
		struct mlx5_wqe_ctrl_seg *c;
		struct mlx5_wqe_raddr_seg *r;
		struct mlx5_wqe_data_seg *d;

		w = q->buf + idx * MLX5_SEND_WQE_BB;
		c = (struct mlx5_wqe_ctrl_seg *)w;
		r = (struct mlx5_wqe_raddr_seg *)(w + sizeof(*c));
		d = (struct mlx5_wqe_data_seg *)(w + sizeof(*c) + sizeof(*r));
		c->opmod_idx_opcode =
			htobe32((q->head & 0xffff) << 8 | MLX5_OPCODE_RDMA_WRITE);
		c->qpn_ds = htobe32(q->qpn << 8 | 3);
		c->signature = 0;
		c->dci_stream_channel_id = 0;
		c->fm_ce_se = k == CHAIN - 1 ? MLX5_WQE_CTRL_CQ_UPDATE : 0;
		c->imm = 0;
		r->raddr = htobe64(raddr + k * MSG);
		r->rkey = htobe32(rkey);
		r->reserved = 0;
		d->byte_count = htobe32(MSG);
		d->lkey = htobe32(lkey);
		d->addr = htobe64(laddr + k * MSG);
		q->wrid[idx] = wr_id + k;
		q->head++;
	}
	ring(q, w, 0);
	return 0;
}

static inline __attribute__((always_inline)) int
post_recv(struct frq *q, uint64_t addr, uint32_t lkey, uint64_t wr_id)
{
	uint32_t idx;
	struct mlx5_wqe_data_seg *d;

	if (q->head - q->tail >= q->wqe_cnt)
		return ENOMEM;
	idx = q->head & (q->wqe_cnt - 1);
	d = (struct mlx5_wqe_data_seg *)(q->buf + idx * q->stride);
	d->byte_count = htobe32(MSG);
	d->lkey = htobe32(lkey);
	d->addr = htobe64(addr);
	if (q->stride > sizeof(*d)) {
		/* The scatter list ends at an invalid key. */
		d[1].byte_count = 0;
		d[1].lkey = htobe32(MLX5_INVALID_LKEY);
		d[1].addr = 0;
	}
	q->wrid[idx] = wr_id;
	q->head++;
	compiler_barrier();
	q->dbrec[MLX5_RCV_DBR] = htobe32(q->head & 0xffff);
	return 0;
}

/* The CQE at the consumer index, or NULL if the device has not written it. */
static inline __attribute__((always_inline)) struct mlx5_cqe64 *
next_cqe(struct fcq *cq)
{
	uint8_t *p = cq->buf + (cq->ci & (cq->cqe_cnt - 1)) * cq->cqe_size;
	struct mlx5_cqe64 *c = (struct mlx5_cqe64 *)(p + cq->cqe_size - 64);
	uint8_t op_own = c->op_own;

	if ((op_own >> 4) == MLX5_CQE_INVALID ||
	    (op_own & MLX5_CQE_OWNER_MASK) != !!(cq->ci & cq->cqe_cnt))
		return NULL;
	return c;
}

/* Polls one send completion of `q`: 1 with its wr_id, 0 if none, -1 for
 * an error or foreign CQE. */
static inline __attribute__((always_inline)) int
poll_send(struct fcq *cq, struct fsq *q, uint64_t *wr_id)
{
	struct mlx5_cqe64 *c = next_cqe(cq);
	uint16_t ctr;

	if (!c)
		return 0;
	asm volatile("lfence" ::: "memory");
	if ((c->op_own >> 4) != MLX5_CQE_REQ ||
	    (be32toh(c->sop_drop_qpn) & 0xffffff) != q->qpn)
		return -1;
	ctr = be16toh(c->wqe_counter);
	*wr_id = q->wrid[ctr & (q->wqe_cnt - 1)];
	q->tail += (uint16_t)(ctr + 1 - (uint16_t)q->tail);
	cq->ci++;
	compiler_barrier();
	cq->dbrec[CQ_SET_CI] = htobe32(cq->ci & 0xffffff);
	return 1;
}

/* Polls one receive completion of `q`, as poll_send. */
static inline __attribute__((always_inline)) int
poll_recv(struct fcq *cq, struct frq *q, uint32_t qpn, uint64_t *wr_id)
{
	struct mlx5_cqe64 *c = next_cqe(cq);

	if (!c)
		return 0;
	asm volatile("lfence" ::: "memory");
	if ((c->op_own >> 4) != MLX5_CQE_RESP_SEND ||
	    (be32toh(c->sop_drop_qpn) & 0xffffff) != qpn)
		return -1;
	*wr_id = q->wrid[q->tail & (q->wqe_cnt - 1)];
	q->tail++;
	cq->ci++;
	compiler_barrier();
	cq->dbrec[CQ_SET_CI] = htobe32(cq->ci & 0xffffff);
	return 1;
}

/* The measured steps and their unmeasured twins (warm-up). */
#define TWINS(name, ret, params, args, body)                                   \
	static inline __attribute__((always_inline)) ret name##_body params   \
		body                                                             \
	__attribute__((noinline)) ret measured_##name params                  \
	{                                                                      \
		return name##_body args;                                       \
	}                                                                      \
	__attribute__((noinline)) ret warm_##name params                      \
	{                                                                      \
		return name##_body args;                                       \
	}

TWINS(post_send, int, (struct fsq *q, uint64_t a, uint32_t k, uint64_t id),
      (q, a, k, id), { return post_send(q, a, k, id); })
TWINS(post_write, int,
      (struct fsq *q, uint64_t la, uint32_t lk, uint64_t ra, uint32_t rk,
       uint64_t id),
      (q, la, lk, ra, rk, id),
      { return post_write_chain(q, la, lk, ra, rk, id); })
TWINS(post_recv, int, (struct frq *q, uint64_t a, uint32_t k, uint64_t id),
      (q, a, k, id), { return post_recv(q, a, k, id); })
TWINS(poll_send, int, (struct fcq *cq, struct fsq *q, uint64_t *id),
      (cq, q, id), { return poll_send(cq, q, id); })
TWINS(poll_recv, int,
      (struct fcq *cq, struct frq *q, uint32_t qpn, uint64_t *id),
      (cq, q, qpn, id), { return poll_recv(cq, q, qpn, id); })

/* Waits (unmeasured, bounded) until the CQ holds a CQE. */
static void wait_cqe(struct fcq *cq)
{
	long i;

	for (i = 0; i < 2000000000L; i++) {
		if (next_cqe(cq))
			return;
		sched_yield();
	}
	fprintf(stderr, "floor_mlx5.c: completion never arrived\n");
	exit(1);
}

/* Reaps one completion of a libibverbs-driven CQ (unmeasured). */
static void reap(struct ibv_cq *cq, enum ibv_wc_opcode op)
{
	struct ibv_wc wc;
	long i;
	int n;

	for (i = 0; i < 2000000000L; i++) {
		n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			die("ibv_poll_cq", EIO);
		if (n == 1) {
			if (wc.status != IBV_WC_SUCCESS || wc.opcode != op) {
				fprintf(stderr, "floor_mlx5.c: status %d opcode %d\n",
					wc.status, wc.opcode);
				exit(1);
			}
			return;
		}
		sched_yield();
	}
	fprintf(stderr, "floor_mlx5.c: completion never arrived\n");
	exit(1);
}

struct side {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;
};

static void setup_side(struct ibv_context *ctx, struct ibv_pd *pd,
		       struct side *s)
{
	struct ibv_qp_init_attr qa;

	s->cq = ibv_create_cq(ctx, DEPTH, NULL, NULL, 0);
	if (!s->cq)
		die("ibv_create_cq", errno);
	pair_buffer(pd, &s->buf, &s->mr);
	pair_qp_attr(&qa, s->cq, DEPTH);
	s->qp = ibv_create_qp(pd, &qa);
	if (!s->qp)
		die("ibv_create_qp", errno);
}


/* The raw queues of `s`'s QP and CQ. */
static void raw(struct side *s, struct fsq *sq, struct frq *rq, struct fcq *cq)
{
	struct mlx5dv_qp dq;
	struct mlx5dv_cq dc;
	struct mlx5dv_obj o;
	int rc;

	memset(&o, 0, sizeof(o));
	o.qp.in = s->qp;
	o.qp.out = &dq;
	o.cq.in = s->cq;
	o.cq.out = &dc;
	rc = mlx5dv_init_obj(&o, MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ);
	if (rc)
		die("mlx5dv_init_obj", rc);
	if (dq.sq.stride != MLX5_SEND_WQE_BB || dq.sq.wqe_cnt > WRIDS ||
	    dq.rq.wqe_cnt > WRIDS || !dq.bf.reg || !dq.bf.size) {
		fprintf(stderr, "floor_mlx5.c: unexpected queue shape: sq %u x %u, rq %u, bf %p/%u\n", dq.sq.wqe_cnt, dq.sq.stride, dq.rq.wqe_cnt, dq.bf.reg, dq.bf.size);
		exit(1);
	}
	memset(sq, 0, sizeof(*sq));
	sq->buf = dq.sq.buf;
	sq->wqe_cnt = dq.sq.wqe_cnt;
	sq->qpn = s->qp->qp_num;
	sq->dbrec = dq.dbrec;
	sq->bf = dq.bf.reg;
	sq->bf_size = dq.bf.size;
	memset(rq, 0, sizeof(*rq));
	rq->buf = dq.rq.buf;
	rq->wqe_cnt = dq.rq.wqe_cnt;
	rq->stride = dq.rq.stride;
	rq->dbrec = dq.dbrec;
	memset(cq, 0, sizeof(*cq));
	cq->buf = dc.buf;
	cq->cqe_cnt = dc.cqe_cnt;
	cq->cqe_size = dc.cqe_size;
	cq->dbrec = dc.dbrec;
}

int main(int argc, char **argv)
{
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct side a, b;
	struct fsq asq, bsq;
	struct frq arq, brq;
	struct fcq acq, bcq;
	struct ibv_sge send_sge, recv_sge;
	struct ibv_send_wr send_wr, *sbad;
	struct ibv_recv_wr recv_wr, *rbad;
	const char *mode, *dev = "mlx5_0";
	long iters, i, total;
	uint64_t id;
	int gid_index = 0, k, rc, verified;
	int is_send, is_recv, is_write;

	if (argc < 3) {
		fprintf(stderr, "usage: floor_mlx5 send|recv|write32|batch32 ITERS [DEVICE [GID_INDEX]]\n");
		return 2;
	}
	mode = argv[1];
	iters = strtol(argv[2], NULL, 10);
	if (argc > 3)
		dev = argv[3];
	if (argc > 4)
		gid_index = atoi(argv[4]);
	if (!pair_mode(mode, iters, &is_send, &is_recv, &is_write))
		return 2;
	ctx = open_named(dev);
	pd = ibv_alloc_pd(ctx);
	if (!pd)
		die("ibv_alloc_pd", errno);
	setup_side(ctx, pd, &a);
	setup_side(ctx, pd, &b);
	connect_pair(ctx, a.qp, b.qp, gid_index);
	raw(&a, &asq, &arq, &acq);
	raw(&b, &bsq, &brq, &bcq);

	for (k = 0; k < 4096; k++)
		a.buf[k] = (uint8_t)(k * 7 + 3);

	/* B's receives (send mode) and A's sends (recv mode) go through
	 * libibverbs, on the side not driven by hand. */
	pair_send_wr(&send_wr, &send_sge, a.buf, MSG, a.mr->lkey);
	pair_recv_wr(&recv_wr, &recv_sge, b.buf, MSG, b.mr->lkey);

	total = WARMUP + iters;
	for (i = 0; i < total; i++) {
		int measure = i >= WARMUP;

		if (is_send) {
			if ((rc = ibv_post_recv(b.qp, &recv_wr, &rbad)))
				die("ibv_post_recv", rc);
			rc = measure ? measured_post_send(&asq, (uintptr_t)a.buf, a.mr->lkey, 1)
				     : warm_post_send(&asq, (uintptr_t)a.buf, a.mr->lkey, 1);
			if (rc)
				die("post_send", rc);
			wait_cqe(&acq);
			rc = measure ? measured_poll_send(&acq, &asq, &id)
				     : warm_poll_send(&acq, &asq, &id);
			if (rc != 1 || id != 1) {
				fprintf(stderr, "floor_mlx5.c: poll gave %d, wr_id %llu\n",
					rc, (unsigned long long)id);
				return 1;
			}
			reap(b.cq, IBV_WC_RECV);
		} else if (is_recv) {
			rc = measure ? measured_post_recv(&brq, (uintptr_t)b.buf, b.mr->lkey, 2)
				     : warm_post_recv(&brq, (uintptr_t)b.buf, b.mr->lkey, 2);
			if (rc)
				die("post_recv", rc);
			if ((rc = ibv_post_send(a.qp, &send_wr, &sbad)))
				die("ibv_post_send", rc);
			reap(a.cq, IBV_WC_SEND);
			wait_cqe(&bcq);
			rc = measure ? measured_poll_recv(&bcq, &brq, b.qp->qp_num, &id)
				     : warm_poll_recv(&bcq, &brq, b.qp->qp_num, &id);
			if (rc != 1 || id != 2) {
				fprintf(stderr, "floor_mlx5.c: poll gave %d, wr_id %llu\n",
					rc, (unsigned long long)id);
				return 1;
			}
		} else {
			rc = measure ? measured_post_write(&asq, (uintptr_t)a.buf, a.mr->lkey,
							   (uintptr_t)b.buf, b.mr->rkey, 100)
				     : warm_post_write(&asq, (uintptr_t)a.buf, a.mr->lkey,
						       (uintptr_t)b.buf, b.mr->rkey, 100);
			if (rc)
				die("post_write", rc);
			wait_cqe(&acq);
			rc = measure ? measured_poll_send(&acq, &asq, &id)
				     : warm_poll_send(&acq, &asq, &id);
			if (rc != 1 || id != 100 + CHAIN - 1) {
				fprintf(stderr, "floor_mlx5.c: poll gave %d, wr_id %llu\n",
					rc, (unsigned long long)id);
				return 1;
			}
		}
	}
	verified = is_write ? CHAIN * MSG : MSG;
	if (memcmp(a.buf, b.buf, verified)) {
		fprintf(stderr, "floor_mlx5.c: the data did not arrive intact\n");
		return 1;
	}
	printf("floor_mlx5.c: mode=%s iters=%ld verified=%d bytes\n", mode, iters,
	       verified);
	return 0;
}
