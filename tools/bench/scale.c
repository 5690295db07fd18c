/*
 * The control-path scale probe, on rdma-core (libibverbs): the twin of
 * verbs/examples/scale.rs, which `cargo xtask bench` runs next to it.
 *
 * scale qp|mr N REPS [DEVICE]
 *
 * qp: N CQs (16 entries) and N RC QPs created, each QP's port and GID
 * queried (what a program sends its peer), QP i connected to QP i ^ 1 (a
 * lone QP to itself) through INIT, RTR and RTS with the attributes
 * rverbs' Qp::connect uses by default, then everything destroyed.
 * mr: N 4 KiB buffers (mapped beforehand) registered, then deregistered.
 * One unmeasured round first, then REPS measured rounds, each timed with
 * CLOCK_MONOTONIC; under callgrind (--toggle-collect='*measured_*') only
 * the measured rounds count. Prints
 *
 *   scale: what=W n=N reps=R median_ns=T min_ns=T
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <infiniband/verbs.h>

#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

struct ep {
	uint32_t qpn;
	uint32_t psn;
	uint16_t lid;
	union ibv_gid gid;
};

static int connect_qp(struct ibv_qp *qp, const struct ep *me, const struct ep *peer, int gid_index)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = 1;
	a.qp_access_flags = ACCESS;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer->qpn;
	a.rq_psn = peer->psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = peer->gid;
	a.ah_attr.grh.sgid_index = gid_index;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.dlid = peer->lid;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				      IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = me->psn;
	a.max_rd_atomic = 1;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static int qp_lifecycle(struct ibv_context *ctx, struct ibv_pd *pd, int n, int gid_index)
{
	struct ibv_cq **cqs = calloc(n, sizeof(*cqs));
	struct ibv_qp **qps = calloc(n, sizeof(*qps));
	struct ep *eps = calloc(n, sizeof(*eps));
	int i, rc = -1;

	if (!cqs || !qps || !eps)
		goto out;
	for (i = 0; i < n; i++)
		if (!(cqs[i] = ibv_create_cq(ctx, 16, NULL, NULL, 0)))
			goto out;
	for (i = 0; i < n; i++) {
		struct ibv_qp_init_attr ia;

		memset(&ia, 0, sizeof(ia));
		ia.send_cq = cqs[i];
		ia.recv_cq = cqs[i];
		ia.qp_type = IBV_QPT_RC;
		ia.cap.max_send_wr = 64;
		ia.cap.max_recv_wr = 64;
		ia.cap.max_send_sge = 1;
		ia.cap.max_recv_sge = 1;
		if (!(qps[i] = ibv_create_qp(pd, &ia)))
			goto out;
	}
	for (i = 0; i < n; i++) {
		struct ibv_port_attr pa;

		if (ibv_query_port(ctx, 1, &pa) || ibv_query_gid(ctx, 1, gid_index, &eps[i].gid))
			goto out;
		eps[i].qpn = qps[i]->qp_num;
		eps[i].psn = i & 0xffffff;
		eps[i].lid = pa.lid;
	}
	for (i = 0; i < n; i++) {
		int peer = n == 1 ? 0 : ((i ^ 1) < n ? (i ^ 1) : n - 1);

		if (connect_qp(qps[i], &eps[i], &eps[peer], gid_index))
			goto out;
	}
	rc = 0;
out:
	for (i = 0; qps && i < n; i++)
		if (qps[i])
			ibv_destroy_qp(qps[i]);
	for (i = 0; cqs && i < n; i++)
		if (cqs[i])
			ibv_destroy_cq(cqs[i]);
	free(cqs);
	free(qps);
	free(eps);
	return rc;
}

static int mr_lifecycle(struct ibv_pd *pd, void **bufs, int n)
{
	struct ibv_mr **mrs = calloc(n, sizeof(*mrs));
	int i, rc = 0;

	if (!mrs)
		return -1;
	for (i = 0; i < n; i++)
		if (!(mrs[i] = ibv_reg_mr(pd, bufs[i], 4096, ACCESS))) {
			rc = -1;
			break;
		}
	for (i = 0; i < n; i++)
		if (mrs[i] && ibv_dereg_mr(mrs[i]))
			rc = -1;
	free(mrs);
	return rc;
}

__attribute__((noinline)) int measured_qp_lifecycle(struct ibv_context *ctx, struct ibv_pd *pd,
						    int n, int gid_index)
{
	return qp_lifecycle(ctx, pd, n, gid_index);
}

__attribute__((noinline)) int measured_mr_lifecycle(struct ibv_pd *pd, void **bufs, int n)
{
	return mr_lifecycle(pd, bufs, n);
}

static long long now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int cmp_ll(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;

	return (x > y) - (x < y);
}

/* The GID index rverbs' default_gid_index picks: a RoCE v2 IPv4 GID, else
 * any RoCE v2 GID, else the first valid one. */
static int pick_gid(struct ibv_context *ctx)
{
	struct ibv_port_attr pa;
	int i, v2 = -1, first = -1;

	if (ibv_query_port(ctx, 1, &pa))
		return -1;
	for (i = 0; i < pa.gid_tbl_len; i++) {
		struct ibv_gid_entry e;
		static const uint8_t v4[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

		if (ibv_query_gid_ex(ctx, 1, i, &e, 0))
			continue;
		if (first < 0)
			first = i;
		if (e.gid_type == IBV_GID_TYPE_ROCE_V2) {
			if (!memcmp(e.gid.raw, v4, 12))
				return i;
			if (v2 < 0)
				v2 = i;
		}
	}
	return v2 >= 0 ? v2 : first;
}

int main(int argc, char **argv)
{
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	struct ibv_pd *pd;
	const char *what, *dev;
	void **bufs;
	long long *t;
	int n, reps, i, gid_index, num;

	if (argc < 4) {
		fprintf(stderr, "usage: scale qp|mr N REPS [DEVICE]\n");
		return 2;
	}
	what = argv[1];
	n = atoi(argv[2]);
	reps = atoi(argv[3]);
	dev = argc > 4 ? argv[4] : "rxe0";
	if (n <= 0 || reps <= 0 || (strcmp(what, "qp") && strcmp(what, "mr"))) {
		fprintf(stderr, "scale: bad kind, N or REPS\n");
		return 2;
	}
	list = ibv_get_device_list(&num);
	for (i = 0; list && i < num; i++)
		if (!strcmp(ibv_get_device_name(list[i]), dev))
			ctx = ibv_open_device(list[i]);
	if (!ctx) {
		fprintf(stderr, "scale: cannot open %s\n", dev);
		return 1;
	}
	pd = ibv_alloc_pd(ctx);
	gid_index = pick_gid(ctx);
	bufs = calloc(n, sizeof(*bufs));
	t = calloc(reps, sizeof(*t));
	if (!pd || gid_index < 0 || !bufs || !t) {
		fprintf(stderr, "scale: set-up failed\n");
		return 1;
	}
	for (i = 0; i < n; i++) {
		bufs[i] = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (bufs[i] == MAP_FAILED) {
			perror("mmap");
			return 1;
		}
	}
	if (!strcmp(what, "qp") ? qp_lifecycle(ctx, pd, n, gid_index) : mr_lifecycle(pd, bufs, n)) {
		perror("scale: warm-up round");
		return 1;
	}
	for (i = 0; i < reps; i++) {
		long long t0 = now_ns();
		int rc = !strcmp(what, "qp") ? measured_qp_lifecycle(ctx, pd, n, gid_index)
					     : measured_mr_lifecycle(pd, bufs, n);

		if (rc) {
			perror("scale: measured round");
			return 1;
		}
		t[i] = now_ns() - t0;
	}
	qsort(t, reps, sizeof(*t), cmp_ll);
	printf("scale: what=%s n=%d reps=%d median_ns=%lld min_ns=%lld\n", what, n, reps,
	       t[reps / 2], t[0]);
	return 0;
}
