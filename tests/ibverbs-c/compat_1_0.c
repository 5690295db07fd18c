/*
 * libibverbs' IBVERBS_1.0 compatibility versions, called as a program
 * linked against libibverbs 1.0 calls them: each bound explicitly with
 * .symver, on the 1.0 ABI's structs (v10.h: the installed verbs.h has
 * only today's), the data path through the 1.0
 * context's operations table as the 1.0 inline functions went.
 *
 * usage: compat_1_0                    the device list only (the host)
 *        compat_1_0 DEVICE GID_INDEX   and a round on DEVICE's port 1
 *
 * The list: the 1.0 list must hold what the 1.1 list holds (same count,
 * names and GUIDs), or both fail alike. The round: open, the four
 * queries (the GID as the 1.1 query gives it on the real context), a PD,
 * an MR (its keys the real MR's), ibv_reg_mr_iova@IBVERBS_1.7 on the real
 * PD, a CQ on a completion channel, an SRQ, two RC QPs on them connected
 * to each other, query_qp (the 1.0 objects come back), a receive on the
 * SRQ and a SEND through the 1.0 operations, the completion event (the
 * 1.0 CQ and its context), both completions polled through the 1.0
 * poll_cq and the payload checked, a failing post whose bad_wr is the 1.0
 * request, an AH, then everything destroyed. Each step prints one line
 * without addresses or numbers that differ between runs, so that a run
 * on rdma-core's library and one on ours can be compared line for line.
 * Exits 0 and prints "compat_1_0: ok" when every step passed. Written for
 * this project.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "v10.h"

/* Each 1.0 function under a name of this file, bound to its version. */
#define V10(ret, name, ...)                                                                        \
	ret v10_##name(__VA_ARGS__);                                                               \
	__asm__(".symver v10_" #name ", ibv_" #name "@IBVERBS_1.0")

V10(struct v10_device **, get_device_list, int *num);
V10(void, free_device_list, struct v10_device **list);
V10(const char *, get_device_name, struct v10_device *dev);
V10(uint64_t, get_device_guid, struct v10_device *dev);
V10(struct v10_context *, open_device, struct v10_device *dev);
V10(int, close_device, struct v10_context *ctx);
V10(int, query_device, struct v10_context *ctx, struct ibv_device_attr *attr);
V10(int, query_port, struct v10_context *ctx, uint8_t port, struct ibv_port_attr *attr);
V10(int, query_gid, struct v10_context *ctx, uint8_t port, int index, union ibv_gid *gid);
V10(int, query_pkey, struct v10_context *ctx, uint8_t port, int index, uint16_t *pkey);
V10(struct v10_pd *, alloc_pd, struct v10_context *ctx);
V10(int, dealloc_pd, struct v10_pd *pd);
V10(struct v10_mr *, reg_mr, struct v10_pd *pd, void *addr, size_t length, int access);
V10(int, dereg_mr, struct v10_mr *mr);
V10(struct v10_cq *, create_cq, struct v10_context *ctx, int cqe, void *cq_context,
    struct ibv_comp_channel *channel, int comp_vector);
V10(int, resize_cq, struct v10_cq *cq, int cqe);
V10(int, destroy_cq, struct v10_cq *cq);
V10(int, get_cq_event, struct ibv_comp_channel *channel, struct v10_cq **cq, void **cq_context);
V10(void, ack_cq_events, struct v10_cq *cq, unsigned int nevents);
V10(struct v10_srq *, create_srq, struct v10_pd *pd, struct ibv_srq_init_attr *attr);
V10(int, query_srq, struct v10_srq *srq, struct ibv_srq_attr *attr);
V10(int, destroy_srq, struct v10_srq *srq);
V10(struct v10_qp *, create_qp, struct v10_pd *pd, struct v10_qp_init_attr *attr);
V10(int, query_qp, struct v10_qp *qp, struct ibv_qp_attr *attr, int mask,
    struct v10_qp_init_attr *init);
V10(int, modify_qp, struct v10_qp *qp, struct ibv_qp_attr *attr, int mask);
V10(int, destroy_qp, struct v10_qp *qp);
V10(struct v10_ah *, create_ah, struct v10_pd *pd, struct ibv_ah_attr *attr);
V10(int, destroy_ah, struct v10_ah *ah);

static int failed;

static void step(int ok, const char *what)
{
	printf("%s %s\n", ok ? "ok  " : "FAIL", what);
	if (!ok)
		failed = 1;
}

/* The 1.0 list against the 1.1 list; returns the 1.0 device named
 * `want` (NULL if none or `want` is NULL). */
static struct v10_device *lists(const char *want, struct v10_device ***keep)
{
	struct ibv_device **l11;
	struct v10_device **l10;
	struct v10_device *found = NULL;
	int n10 = -5, n11 = -5, e10, e11, i, same = 1;

	errno = 0;
	l11 = ibv_get_device_list(&n11);
	e11 = errno;
	errno = 0;
	l10 = v10_get_device_list(&n10);
	e10 = errno;
	*keep = l10;
	if (!l11 || !l10) {
		step(!l11 && !l10 && e10 == e11, "get_device_list@1.0: fails as the 1.1 function fails");
		if (l11)
			ibv_free_device_list(l11);
		return NULL;
	}
	step(n10 == n11, "get_device_list@1.0: as many devices as the 1.1 list");
	for (i = 0; i < n10 && i < n11; i++) {
		const char *name = v10_get_device_name(l10[i]);

		if (!name || strcmp(name, ibv_get_device_name(l11[i])) ||
		    v10_get_device_guid(l10[i]) != ibv_get_device_guid(l11[i]))
			same = 0;
		if (want && name && !strcmp(name, want))
			found = l10[i];
	}
	step(same && !l10[n10], "get_device_name@1.0, get_device_guid@1.0: the 1.1 list's, NULL-terminated");
	ibv_free_device_list(l11);
	return found;
}

static int modify(struct v10_qp *qp, uint32_t dest, const union ibv_gid *gid, int gid_index)
{
	struct ibv_qp_attr a;
	int rc;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
	rc = v10_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	if (rc)
		return rc;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = 100;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.sgid_index = gid_index;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	rc = v10_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	if (rc)
		return rc;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 100;
	a.max_rd_atomic = 1;
	return v10_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static void round_on(struct v10_device *dev, int gid_index)
{
	static int cq_mark, srq_mark, qp_mark;
	struct v10_context *ctx;
	struct ibv_device_attr dattr;
	struct ibv_port_attr pattr;
	union ibv_gid gid, gid11;
	uint16_t pkey;
	struct v10_pd *pd;
	struct v10_mr *mr;
	struct ibv_mr *mr17;
	struct ibv_comp_channel *ch;
	struct v10_cq *cq, *ev_cq = NULL;
	struct v10_srq *srq;
	struct v10_qp *qa, *qb;
	struct v10_ah *ah;
	struct ibv_srq_init_attr sia;
	struct ibv_srq_attr sattr;
	struct v10_qp_init_attr qia, qinit;
	struct ibv_qp_attr qattr;
	struct ibv_ah_attr aattr;
	struct ibv_sge sge, rsge;
	struct v10_recv_wr rwr, *rbad = NULL;
	struct v10_send_wr swr, swr2, *sbad = NULL;
	struct ibv_wc wc[4];
	struct pollfd pfd;
	void *ev_ctx = NULL;
	uint8_t *buf, *buf2;
	int got = 0, seen_send = 0, seen_recv = 0, rc, i, tries;

	ctx = v10_open_device(dev);
	step(ctx && ctx->device == dev && ctx->real_context, "open_device@1.0: a 1.0 context on the device");
	if (!ctx)
		return;
	step(!v10_query_device(ctx, &dattr) && dattr.max_qp > 0, "query_device@1.0");
	step(!v10_query_port(ctx, 1, &pattr) && pattr.state == IBV_PORT_ACTIVE, "query_port@1.0: port 1 active");
	step(!v10_query_gid(ctx, 1, gid_index, &gid) &&
		     !ibv_query_gid(ctx->real_context, 1, gid_index, &gid11) && !memcmp(&gid, &gid11, 16),
	     "query_gid@1.0: the 1.1 query's GID");
	step(!v10_query_pkey(ctx, 1, 0, &pkey) && pkey == htobe16(0xffff), "query_pkey@1.0: the default P_Key");
	pd = v10_alloc_pd(ctx);
	step(pd && pd->context == ctx && pd->real_pd, "alloc_pd@1.0");
	if (!pd)
		return;
	buf = aligned_alloc(4096, 4096);
	buf2 = aligned_alloc(4096, 4096);
	memset(buf, 0, 4096);
	mr = v10_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	step(mr && mr->pd == pd && mr->context == ctx && mr->lkey == mr->real_mr->lkey &&
		     mr->rkey == mr->real_mr->rkey,
	     "reg_mr@1.0: the real MR's keys");
	mr17 = ibv_reg_mr_iova(pd->real_pd, buf2, 4096, (uintptr_t)buf2, IBV_ACCESS_LOCAL_WRITE);
	step(mr17 && mr17->addr == buf2 && mr17->length == 4096, "reg_mr_iova@1.7 on the real PD");
	if (mr17)
		step(!ibv_dereg_mr(mr17), "dereg_mr of it");
	ch = ibv_create_comp_channel(ctx->real_context);
	cq = v10_create_cq(ctx, 16, &cq_mark, ch, 0);
	step(ch && cq && cq->context == ctx && cq->cq_context == &cq_mark && cq->cqe == 16,
	     "create_cq@1.0 on a channel: cqe as asked");
	if (!mr || !cq)
		return;
	step(!v10_resize_cq(cq, 32) && cq->cqe == 16, "resize_cq@1.0 (the 1.0 cqe unchanged)");
	memset(&sia, 0, sizeof(sia));
	sia.srq_context = &srq_mark;
	sia.attr.max_wr = 16;
	sia.attr.max_sge = 1;
	srq = v10_create_srq(pd, &sia);
	step(srq && srq->pd == pd && srq->srq_context == &srq_mark && sia.attr.max_wr >= 16,
	     "create_srq@1.0");
	if (!srq)
		return;
	step(!v10_query_srq(srq, &sattr) && sattr.max_wr >= 16, "query_srq@1.0");
	memset(&qia, 0, sizeof(qia));
	qia.qp_context = &qp_mark;
	qia.send_cq = qia.recv_cq = cq;
	qia.srq = srq;
	qia.cap.max_send_wr = 8;
	qia.cap.max_send_sge = 1;
	qia.qp_type = IBV_QPT_RC;
	qa = v10_create_qp(pd, &qia);
	step(qa && qia.cap.max_send_wr >= 8, "create_qp@1.0: cap updated");
	qb = v10_create_qp(pd, &qia);
	step(qb && qb->qp_num == qb->real_qp->qp_num && qb->send_cq == cq && qb->srq == srq &&
		     qb->qp_type == IBV_QPT_RC,
	     "create_qp@1.0: the 1.0 QP's fields");
	if (!qa || !qb)
		return;
	step(!modify(qa, qb->qp_num, &gid, gid_index) && !modify(qb, qa->qp_num, &gid, gid_index),
	     "modify_qp@1.0: both to RTS, connected");
	memset(&qinit, 0, sizeof(qinit));
	step(!v10_query_qp(qa, &qattr, IBV_QP_STATE, &qinit) && qattr.qp_state == IBV_QPS_RTS &&
		     qinit.qp_context == &qp_mark && qinit.send_cq == cq && qinit.recv_cq == cq &&
		     qinit.srq == srq && qinit.qp_type == IBV_QPT_RC,
	     "query_qp@1.0: RTS, the 1.0 CQ and SRQ");

	rsge.addr = (uintptr_t)(buf + 2048);
	rsge.length = 64;
	rsge.lkey = mr->lkey;
	memset(&rwr, 0, sizeof(rwr));
	rwr.wr_id = 7;
	rwr.sg_list = &rsge;
	rwr.num_sge = 1;
	step(!srq->context->ops.post_srq_recv(srq, &rwr, &rbad), "post_srq_recv through the 1.0 ops");
	step(!cq->context->ops.req_notify_cq(cq, 0), "req_notify_cq through the 1.0 ops");
	for (i = 0; i < 64; i++)
		buf[i] = (uint8_t)(i * 3 + 1);
	sge.addr = (uintptr_t)buf;
	sge.length = 64;
	sge.lkey = mr->lkey;
	memset(&swr, 0, sizeof(swr));
	swr.wr_id = 9;
	swr.sg_list = &sge;
	swr.num_sge = 1;
	swr.opcode = IBV_WR_SEND;
	swr.send_flags = IBV_SEND_SIGNALED;
	step(!qa->context->ops.post_send(qa, &swr, &sbad), "post_send through the 1.0 ops");
	pfd.fd = ch->fd;
	pfd.events = POLLIN;
	rc = poll(&pfd, 1, 10000);
	step(rc == 1 && !v10_get_cq_event(ch, &ev_cq, &ev_ctx) && ev_cq == cq && ev_ctx == &cq_mark,
	     "get_cq_event@1.0: the 1.0 CQ and its context");
	if (ev_cq == cq)
		v10_ack_cq_events(cq, 1);
	for (tries = 0; got < 2 && tries < 10000; tries++) {
		int n = cq->context->ops.poll_cq(cq, 4, wc);

		if (n < 0)
			break;
		for (i = 0; i < n; i++, got++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				continue;
			if (wc[i].wr_id == 9 && wc[i].opcode == IBV_WC_SEND)
				seen_send = 1;
			if (wc[i].wr_id == 7 && wc[i].opcode == IBV_WC_RECV && wc[i].byte_len == 64)
				seen_recv = 1;
		}
		if (got < 2)
			usleep(1000);
	}
	step(seen_send && seen_recv && !memcmp(buf, buf + 2048, 64),
	     "poll_cq through the 1.0 ops: the SEND and its receive, the payload intact");

	/* A request the QP cannot take (more gather entries than it has):
	 * the post fails, naming the second 1.0 request. */
	swr.next = &swr2;
	swr2 = swr;
	swr2.next = NULL;
	swr2.wr_id = 10;
	swr2.num_sge = 64;
	sbad = NULL;
	rc = qa->context->ops.post_send(qa, &swr, &sbad);
	step(rc != 0 && sbad == &swr2, "post_send of a bad chain: fails, bad_wr the 1.0 request");
	for (tries = 0; tries < 200; tries++) {
		if (cq->context->ops.poll_cq(cq, 4, wc) < 0)
			break;
		usleep(1000);
	}

	memset(&aattr, 0, sizeof(aattr));
	aattr.is_global = 1;
	aattr.grh.dgid = gid;
	aattr.grh.sgid_index = gid_index;
	aattr.grh.hop_limit = 1;
	aattr.port_num = 1;
	ah = v10_create_ah(pd, &aattr);
	step(ah && ah->pd == pd && ah->real_ah, "create_ah@1.0");
	if (ah)
		step(!v10_destroy_ah(ah), "destroy_ah@1.0");

	step(!v10_destroy_qp(qa) && !v10_destroy_qp(qb), "destroy_qp@1.0");
	step(!v10_destroy_srq(srq), "destroy_srq@1.0");
	step(!v10_destroy_cq(cq), "destroy_cq@1.0");
	step(!ibv_destroy_comp_channel(ch), "destroy_comp_channel");
	step(!v10_dereg_mr(mr), "dereg_mr@1.0");
	step(!v10_dealloc_pd(pd), "dealloc_pd@1.0");
	step(!v10_close_device(ctx), "close_device@1.0");
	free(buf);
	free(buf2);
}

int main(int argc, char **argv)
{
	struct v10_device **l10 = NULL;
	struct v10_device *dev = lists(argc > 1 ? argv[1] : NULL, &l10);

	/* Which library the loader found (ours defines its marker). */
	fprintf(stderr, "library: %s\n", dlsym(RTLD_DEFAULT, "rverbs_ibverbs_version") ? "ours" : "rdma-core");

	if (argc > 2) {
		step(dev != NULL, "the device is in the 1.0 list");
		if (dev)
			round_on(dev, atoi(argv[2]));
	}
	if (l10)
		v10_free_device_list(l10);
	printf("compat_1_0: %s\n", failed ? "FAILED" : "ok");
	return failed;
}
