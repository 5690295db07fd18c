/*
 * efa_postpoll.c: the rdma-core side of the EFA instruction-count
 * comparison (test-only; built into target/bench/, never linked into
 * anything the workspace ships). It mirrors verbs/examples/efa_postpoll.rs
 * step for step on the emulated EFA device: two SRD QPs of one context,
 * each on its own CQ, an AH to the port's own GID, then ITERS rounds of
 *
 *   send   post_send of one signaled 64-byte SEND on A + the poll that
 *          returns its completion (B's receive is posted and reaped
 *          unmeasured)
 *   recv   post_recv of one 64-byte receive on B + the poll that returns
 *          its completion (A's SEND is posted and reaped unmeasured)
 *
 * Only the functions named measured_* are counted (callgrind
 * --collect-atstart=no --toggle-collect='*measured_*'). EFA has no
 * completion events, so between the post and the measured poll the
 * program reaps the other side's completion (unmeasured: the device
 * writes the receive's entry and then the send's, the send's after the
 * receive's only in SEND mode) and sleeps a little; a measured poll that
 * finds none is counted and reported. Every round sends a payload of its
 * own and compares the received bytes with it (unmeasured), printing the
 * rounds checked as verified=N, which cargo xtask bench requires.
 *
 * Usage: efa_postpoll MODE ITERS [DEVICE]   (default: efa_0)
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/efadv.h>
#include <infiniband/verbs.h>

#define PAIR_PROG "efa_postpoll.c"
#include "pair.h"

#define MSG 64
#define QKEY 0x11111111u
#define WARMUP 50

__attribute__((noinline)) int measured_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;

	return ibv_post_send(qp, wr, &bad);
}

__attribute__((noinline)) int measured_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr)
{
	struct ibv_recv_wr *bad;

	return ibv_post_recv(qp, wr, &bad);
}

__attribute__((noinline)) int measured_poll(struct ibv_cq *cq, struct ibv_wc *wc, int n)
{
	return ibv_poll_cq(cq, n, wc);
}

static void settle(void)
{
	struct timespec ts = { 0, 2 * 1000 * 1000 };

	nanosleep(&ts, NULL);
}

/* One completion of `cq` (unmeasured), successful. */
static void reap(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	int n;

	for (int tries = 0; tries < 5000; tries++) {
		n = ibv_poll_cq(cq, 1, &wc);
		if (n == 1) {
			if (wc.status != IBV_WC_SUCCESS)
				die("completion", EIO);
			return;
		}
		settle();
	}
	die("no completion", ETIMEDOUT);
}

static struct ibv_qp *srd_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr qa = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.qp_type = IBV_QPT_DRIVER,
	};
	struct ibv_qp *qp = efadv_create_driver_qp(pd, &qa, EFADV_QP_DRIVER_TYPE_SRD);
	struct ibv_qp_attr a;

	if (!qp)
		die("efadv_create_driver_qp", errno);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qkey = QKEY;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		die("INIT", errno);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		die("RTR", errno);
	a.qp_state = IBV_QPS_RTS;
	a.rnr_retry = 7;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_RNR_RETRY))
		die("RTS", errno);
	return qp;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: efa_postpoll send|recv ITERS [DEVICE]\n");
		return 2;
	}
	int send = !strcmp(argv[1], "send");
	long iters = atol(argv[2]);
	struct ibv_context *ctx = open_named(argc > 3 ? argv[3] : "efa_0");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char *buf = calloc(1, 2 * MSG);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, 2 * MSG, IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_cq *cqa = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_cq *cqb = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	union ibv_gid gid;

	if (!mr || !cqa || !cqb || ibv_query_gid(ctx, 1, 0, &gid))
		die("setup", errno);
	struct ibv_qp *a = srd_qp(pd, cqa), *b = srd_qp(pd, cqb);
	struct ibv_ah_attr aha = { .is_global = 1, .port_num = 1 };
	aha.grh.dgid = gid;
	struct ibv_ah *ah = ibv_create_ah(pd, &aha);
	if (!ah)
		die("create_ah", errno);

	struct ibv_sge ss = { (uintptr_t)buf, MSG, mr->lkey };
	struct ibv_sge rs = { (uintptr_t)buf + MSG, MSG, mr->lkey };
	struct ibv_send_wr swr = { .wr_id = 1, .sg_list = &ss, .num_sge = 1,
				   .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_recv_wr rwr = { .wr_id = 2, .sg_list = &rs, .num_sge = 1 };
	struct ibv_send_wr *sbad;
	struct ibv_recv_wr *rbad;
	struct ibv_wc wc;
	long empty = 0, verified = 0;
	unsigned char pat[MSG];

	swr.wr.ud.ah = ah;
	swr.wr.ud.remote_qpn = b->qp_num;
	swr.wr.ud.remote_qkey = QKEY;
	for (long i = 0; i < WARMUP + iters; i++) {
		int measured = i >= WARMUP;
		/* Each round's payload differs; the receive buffer starts cleared. */
		for (int j = 0; j < MSG; j++)
			pat[j] = (unsigned char)((unsigned char)i * 31 + j);
		memcpy(buf, pat, MSG);
		memset(buf + MSG, 0, MSG);
		if (send) {
			if (ibv_post_recv(b, &rwr, &rbad))
				die("post_recv", errno);
			if (measured ? measured_post_send(a, &swr) : ibv_post_send(a, &swr, &sbad))
				die("post_send", errno);
			/* The device writes the receive's entry, then the send's. */
			reap(cqb);
			settle();
			if (measured) {
				while (measured_poll(cqa, &wc, 1) != 1)
					empty++, settle();
				if (wc.status != IBV_WC_SUCCESS)
					die("send completion", EIO);
			} else {
				reap(cqa);
			}
		} else {
			if (measured ? measured_post_recv(b, &rwr) : ibv_post_recv(b, &rwr, &rbad))
				die("post_recv", errno);
			if (ibv_post_send(a, &swr, &sbad))
				die("post_send", errno);
			reap(cqa);
			settle();
			if (measured) {
				while (measured_poll(cqb, &wc, 1) != 1)
					empty++, settle();
				if (wc.status != IBV_WC_SUCCESS)
					die("recv completion", EIO);
			} else {
				reap(cqb);
			}
		}
		/* The receive has completed in both modes: its bytes are the send's. */
		if (memcmp(buf + MSG, pat, MSG))
			die("received bytes differ from the sent", EIO);
		verified++;
	}
	printf("efa_postpoll.c %s %ld iterations, %ld empty measured polls, verified=%ld\n",
	       argv[1], iters, empty, verified);
	return 0;
}
