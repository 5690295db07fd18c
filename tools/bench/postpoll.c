/*
 * postpoll.c: the rdma-core side of the instruction-count comparison run by
 * `cargo xtask bench` (test-only; built into target/bench/, never linked
 * into anything the workspace ships).
 *
 * It mirrors verbs/examples/postpoll.rs step for step: two RC QPs on one
 * device connected to each other, then ITERS rounds of one of
 *
 *   send     post_send of one signaled 64-byte SEND on A + the poll that
 *            returns its completion (B's receive is re-posted unmeasured)
 *   recv     post_recv of one 64-byte receive on B + the poll that returns
 *            its completion (A's SEND is posted and reaped unmeasured)
 *   write32  post_send of a chain of 32 64-byte RDMA WRITEs, only the last
 *            signaled, + the poll that returns the one completion
 *   batch32  the same chain: rdma-core has no batch call, so this is the
 *            reference for the work rverbs' post_send_batch does (32
 *            RDMA WRITEs, the last signaled, + the poll)
 *
 * Only the functions named measured_* are counted (callgrind
 * --collect-atstart=no --toggle-collect='*measured_*'). Between the post and
 * the poll the program blocks on the completion channel (unmeasured), so
 * every measured poll finds its completion and no empty polls are counted.
 * Warm-up rounds call the same verbs through unmeasured paths first.
 *
 * With a fifth argument `ex`, the same steps go through libibverbs'
 * extended API instead: QPs from ibv_create_qp_ex with the operations
 * asked for, sends built with ibv_wr_start / ibv_wr_send (or
 * ibv_wr_rdma_write) / ibv_wr_set_sge / ibv_wr_complete, CQs from
 * ibv_create_cq_ex polled with ibv_start_poll / ibv_end_poll (receives are
 * still posted with ibv_post_recv: that API has no other).
 *
 * With `td` instead, the plain API's steps on QPs and CQs of a thread
 * domain: a parent domain with a TD (ibv_alloc_td, ibv_alloc_parent_domain)
 * holds the QPs, and the CQs are made on it with ibv_create_cq_ex
 * (IBV_CQ_INIT_ATTR_MASK_PD), polled with ibv_poll_cq: the library may take
 * no lock for them. (librxe has no thread domains; libmlx5 gives a TD a
 * UAR of its own, which the emulated ConnectX-5 cannot allocate.)
 *
 * Usage: postpoll MODE ITERS [DEVICE [GID_INDEX [ex|td]]]   (defaults: rxe0, 1)
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#define PAIR_PROG "postpoll.c"
#include "pair.h"

#define MSG 64
#define CHAIN 32
#define DEPTH 64
#define WARMUP 50
#define WAIT_MS 10000


__attribute__((noinline)) int measured_post_send(struct ibv_qp *qp,
						 struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;

	return ibv_post_send(qp, wr, &bad);
}

__attribute__((noinline)) int measured_post_recv(struct ibv_qp *qp,
						 struct ibv_recv_wr *wr)
{
	struct ibv_recv_wr *bad;

	return ibv_post_recv(qp, wr, &bad);
}

__attribute__((noinline)) int measured_poll(struct ibv_cq *cq,
					    struct ibv_wc *wc, int n)
{
	return ibv_poll_cq(cq, n, wc);
}

/* The extended API's steps (the `ex` argument): inlined into the
 * unmeasured warm-up, called through measured_* when counted. */
static inline int post_send_ex(struct ibv_qp_ex *qx,
			       const struct ibv_send_wr *wr)
{
	ibv_wr_start(qx);
	for (; wr; wr = wr->next) {
		qx->wr_id = wr->wr_id;
		qx->wr_flags = wr->send_flags;
		if (wr->opcode == IBV_WR_SEND)
			ibv_wr_send(qx);
		else
			ibv_wr_rdma_write(qx, wr->wr.rdma.rkey,
					  wr->wr.rdma.remote_addr);
		ibv_wr_set_sge(qx, wr->sg_list->lkey, wr->sg_list->addr,
			       wr->sg_list->length);
	}
	return ibv_wr_complete(qx);
}

static inline int poll_ex(struct ibv_cq_ex *cq, struct ibv_wc *wc)
{
	struct ibv_poll_cq_attr attr = { .comp_mask = 0 };
	int rc = ibv_start_poll(cq, &attr);

	if (rc)
		return rc == ENOENT ? 0 : -1;
	wc->wr_id = cq->wr_id;
	wc->status = cq->status;
	wc->opcode = ibv_wc_read_opcode(cq);
	wc->byte_len = ibv_wc_read_byte_len(cq);
	ibv_end_poll(cq);
	return 1;
}

__attribute__((noinline)) int measured_post_send_ex(struct ibv_qp_ex *qx,
						    const struct ibv_send_wr *wr)
{
	return post_send_ex(qx, wr);
}

__attribute__((noinline)) int measured_poll_ex(struct ibv_cq_ex *cq,
					       struct ibv_wc *wc)
{
	return poll_ex(cq, wc);
}

/* Everything below is unmeasured. */

/* Whether the extended API is used (the `ex` argument). */
static int ex;
/* Whether the QPs and CQs are of a thread domain (the `td` argument). */
static int td;

struct side {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;
	/* With `ex`: the same CQ and QP through the extended API. */
	struct ibv_cq_ex *cqx;
	struct ibv_qp_ex *qpx;
};

/* A post on `s`'s QP through the API the run uses, counted or not. */
static int post_send_any(struct side *s, struct ibv_send_wr *wr, int measure)
{
	struct ibv_send_wr *bad;

	if (ex)
		return measure ? measured_post_send_ex(s->qpx, wr)
			       : post_send_ex(s->qpx, wr);
	return measure ? measured_post_send(s->qp, wr)
		       : ibv_post_send(s->qp, wr, &bad);
}

/* A poll of `s`'s CQ for up to 16 completions (one, through the extended
 * API), counted or not. */
static int poll_any(struct side *s, struct ibv_wc *wc, int measure)
{
	if (ex)
		return measure ? measured_poll_ex(s->cqx, wc) : poll_ex(s->cqx, wc);
	return measure ? measured_poll(s->cq, wc, 16) : ibv_poll_cq(s->cq, 16, wc);
}

static struct ibv_comp_channel *chan;
static unsigned int events;

static void arm(struct ibv_cq *cq)
{
	int rc = ibv_req_notify_cq(cq, 0);

	if (rc)
		die("ibv_req_notify_cq", rc);
}

/* Blocks until the armed cq fires (bounded). */
static void wait_event(struct ibv_cq *want)
{
	struct pollfd p = { .fd = chan->fd, .events = POLLIN };
	struct ibv_cq *cq;
	void *ctx;
	int rc = poll(&p, 1, WAIT_MS);

	if (rc == 0) {
		fprintf(stderr, "postpoll.c: no completion event in %d ms\n",
			WAIT_MS);
		exit(1);
	}
	if (rc < 0)
		die("poll", errno);
	if (ibv_get_cq_event(chan, &cq, &ctx))
		die("ibv_get_cq_event", errno);
	events++;
	if (cq != want) {
		fprintf(stderr, "postpoll.c: event for the wrong CQ\n");
		exit(1);
	}
}

static void check_wc(const struct ibv_wc *wc, enum ibv_wc_opcode op)
{
	if (wc->status != IBV_WC_SUCCESS || wc->opcode != op) {
		fprintf(stderr, "postpoll.c: completion status %d opcode %d, expected success/%d\n",
			wc->status, wc->opcode, op);
		exit(1);
	}
}

/* Polls (unmeasured) until one completion arrives. */
static void reap(struct ibv_cq *cq, enum ibv_wc_opcode op)
{
	struct ibv_wc wc[16];
	int i, n;

	for (i = 0; i < 100000000; i++) {
		n = ibv_poll_cq(cq, 16, wc);
		if (n < 0)
			die("ibv_poll_cq", EIO);
		if (n == 1) {
			check_wc(&wc[0], op);
			return;
		}
		if (n > 1) {
			fprintf(stderr, "postpoll.c: %d completions, expected 1\n", n);
			exit(1);
		}
	}
	fprintf(stderr, "postpoll.c: completion never arrived\n");
	exit(1);
}

static void setup_side(struct ibv_context *ctx, struct ibv_pd *pd,
		       struct side *s)
{
	struct ibv_qp_init_attr qa;

	if (ex || td) {
		struct ibv_cq_init_attr_ex ca = {
			.cqe = DEPTH,
			.channel = chan,
			.wc_flags = IBV_WC_STANDARD_FLAGS,
		};

		if (td) {
			ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
			ca.parent_domain = pd;
		}
		s->cqx = ibv_create_cq_ex(ctx, &ca);
		if (!s->cqx)
			die("ibv_create_cq_ex", errno);
		s->cq = ibv_cq_ex_to_cq(s->cqx);
	} else {
		s->cq = ibv_create_cq(ctx, DEPTH, NULL, chan, 0);
	}
	if (!s->cq)
		die("ibv_create_cq", errno);
	pair_buffer(pd, &s->buf, &s->mr);
	pair_qp_attr(&qa, s->cq, DEPTH);
	if (ex) {
		struct ibv_qp_init_attr_ex qx;

		memset(&qx, 0, sizeof(qx));
		qx.send_cq = qa.send_cq;
		qx.recv_cq = qa.recv_cq;
		qx.qp_type = qa.qp_type;
		qx.cap = qa.cap;
		qx.pd = pd;
		qx.comp_mask = IBV_QP_INIT_ATTR_PD |
			       IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		qx.send_ops_flags = IBV_QP_EX_WITH_SEND |
				    IBV_QP_EX_WITH_RDMA_WRITE;
		s->qp = ibv_create_qp_ex(ctx, &qx);
		if (s->qp)
			s->qpx = ibv_qp_to_qp_ex(s->qp);
	} else {
		s->qp = ibv_create_qp(pd, &qa);
	}
	if (!s->qp)
		die("ibv_create_qp", errno);
}


int main(int argc, char **argv)
{
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct side a, b;
	struct ibv_sge send_sge, recv_sge, wsge[CHAIN];
	struct ibv_send_wr send_wr, wwr[CHAIN];
	struct ibv_recv_wr recv_wr;
	struct ibv_wc wc[16];
	const char *mode, *dev = "rxe0";
	long iters, i, total;
	int gid_index = 1, n, k, rc;
	int is_send, is_recv, is_write;

	if (argc < 3) {
		fprintf(stderr, "usage: postpoll send|recv|write32|batch32 ITERS [DEVICE [GID_INDEX [ex]]]\n");
		return 2;
	}
	mode = argv[1];
	iters = strtol(argv[2], NULL, 10);
	if (argc > 3)
		dev = argv[3];
	if (argc > 4)
		gid_index = atoi(argv[4]);
	if (argc > 5) {
		if (!strcmp(argv[5], "td")) {
			td = 1;
		} else if (strcmp(argv[5], "ex")) {
			fprintf(stderr, "postpoll.c: the fifth argument is `ex`, `td` or nothing\n");
			return 2;
		} else {
			ex = 1;
		}
	}
	if (!pair_mode(mode, iters, &is_send, &is_recv, &is_write))
		return 2;

	ctx = open_named(dev);
	pd = ibv_alloc_pd(ctx);
	if (!pd)
		die("ibv_alloc_pd", errno);
	if (td) {
		struct ibv_td_init_attr ta = { .comp_mask = 0 };
		struct ibv_parent_domain_init_attr pa = { .pd = pd };

		pa.td = ibv_alloc_td(ctx, &ta);
		if (!pa.td)
			die("ibv_alloc_td", errno);
		pd = ibv_alloc_parent_domain(ctx, &pa);
		if (!pd)
			die("ibv_alloc_parent_domain", errno);
	}
	chan = ibv_create_comp_channel(ctx);
	if (!chan)
		die("ibv_create_comp_channel", errno);
	setup_side(ctx, pd, &a);
	setup_side(ctx, pd, &b);
	connect_pair(ctx, a.qp, b.qp, gid_index);

	for (k = 0; k < 4096; k++)
		a.buf[k] = (uint8_t)(k * 7 + 3);

	pair_send_wr(&send_wr, &send_sge, a.buf, MSG, a.mr->lkey);

	pair_recv_wr(&recv_wr, &recv_sge, b.buf, MSG, b.mr->lkey);

	for (k = 0; k < CHAIN; k++) {
		wsge[k].addr = (uintptr_t)a.buf + k * MSG;
		wsge[k].length = MSG;
		wsge[k].lkey = a.mr->lkey;
		memset(&wwr[k], 0, sizeof(wwr[k]));
		wwr[k].wr_id = 100 + k;
		wwr[k].sg_list = &wsge[k];
		wwr[k].num_sge = 1;
		wwr[k].opcode = IBV_WR_RDMA_WRITE;
		wwr[k].wr.rdma.remote_addr = (uintptr_t)b.buf + k * MSG;
		wwr[k].wr.rdma.rkey = b.mr->rkey;
		wwr[k].next = k + 1 < CHAIN ? &wwr[k + 1] : NULL;
	}
	wwr[CHAIN - 1].send_flags = IBV_SEND_SIGNALED;

	if (is_send) {
		struct ibv_recv_wr *bad;

		if ((rc = ibv_post_recv(b.qp, &recv_wr, &bad)))
			die("ibv_post_recv", rc);
	}
	total = WARMUP + iters;
	for (i = 0; i < total; i++) {
		int measure = i >= WARMUP;
		struct ibv_send_wr *sbad;
		struct ibv_recv_wr *rbad;

		if (is_send) {
			arm(a.cq);
			rc = post_send_any(&a, &send_wr, measure);
			if (rc)
				die("post_send", rc);
			wait_event(a.cq);
			n = poll_any(&a, wc, measure);
			if (n != 1) {
				fprintf(stderr, "postpoll.c: poll returned %d\n", n);
				return 1;
			}
			check_wc(&wc[0], IBV_WC_SEND);
			reap(b.cq, IBV_WC_RECV);
			if ((rc = ibv_post_recv(b.qp, &recv_wr, &rbad)))
				die("ibv_post_recv", rc);
		} else if (is_recv) {
			rc = measure ? measured_post_recv(b.qp, &recv_wr)
				     : ibv_post_recv(b.qp, &recv_wr, &rbad);
			if (rc)
				die("post_recv", rc);
			arm(b.cq);
			if ((rc = ibv_post_send(a.qp, &send_wr, &sbad)))
				die("ibv_post_send", rc);
			wait_event(b.cq);
			n = poll_any(&b, wc, measure);
			if (n != 1) {
				fprintf(stderr, "postpoll.c: poll returned %d\n", n);
				return 1;
			}
			check_wc(&wc[0], IBV_WC_RECV);
			if (wc[0].byte_len != MSG) {
				fprintf(stderr, "postpoll.c: received %u bytes\n", wc[0].byte_len);
				return 1;
			}
			reap(a.cq, IBV_WC_SEND);
		} else {
			arm(a.cq);
			rc = post_send_any(&a, wwr, measure);
			if (rc)
				die("post_send", rc);
			wait_event(a.cq);
			n = poll_any(&a, wc, measure);
			if (n != 1) {
				fprintf(stderr, "postpoll.c: poll returned %d\n", n);
				return 1;
			}
			check_wc(&wc[0], IBV_WC_RDMA_WRITE);
			if (wc[0].wr_id != 100 + CHAIN - 1) {
				fprintf(stderr, "postpoll.c: wr_id %llu\n",
					(unsigned long long)wc[0].wr_id);
				return 1;
			}
		}
	}
	ibv_ack_cq_events(is_recv ? b.cq : a.cq, events);

	/* The bytes really moved. */
	n = is_write ? CHAIN * MSG : MSG;
	if (memcmp(a.buf, b.buf, n)) {
		fprintf(stderr, "postpoll.c: the peer's buffer does not match\n");
		return 1;
	}
	printf("postpoll.c: mode=%s%s iters=%ld wrs_per_iter=%d verified=%d bytes\n",
	       mode, ex ? " (extended API)" : "", iters, is_write ? CHAIN : 1, n);

	ibv_destroy_qp(a.qp);
	ibv_destroy_qp(b.qp);
	ibv_dereg_mr(a.mr);
	ibv_dereg_mr(b.mr);
	ibv_destroy_cq(a.cq);
	ibv_destroy_cq(b.cq);
	ibv_destroy_comp_channel(chan);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	free(a.buf);
	free(b.buf);
	return 0;
}
