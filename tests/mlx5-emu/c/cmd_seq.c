/*
 * Test-only scenario for the mlx5 emulator (tests/mlx5-emu): a FIXED
 * sequence of control-path verbs through unmodified rdma-core (libibverbs
 * + libmlx5). Run with MLX5_EMU_CMD_LOG=<path>, the emulator records every
 * command libibverbs and libmlx5 sent to the device;
 * tests/src/bin/mlx5_cmd_seq.rs makes the same calls through our library
 * and `cargo xtask mlx5` compares both logs field by field
 * (tools/xtask/src/cmd_compare.rs). Any change here must be mirrored
 * there, in the same order.
 *
 * The sequence: open, query device and port, PD, three MRs, a completion
 * channel, two CQs, an SRQ (modified and queried), QPs of every type
 * (RC, UC, UD, RC on the SRQ) taken through INIT, RTR and RTS with
 * explicit attributes, a QP query, two AHs (with and without a global
 * route), a CQ resize, then every object destroyed. No work request is
 * posted. Prints "PASS <step>" per step, "FAIL <step>: <reason>" and exit 1
 * on the first failure.
 *
 * Usage: cmd_seq [DEVICE [GID_INDEX]] (default mlx5_0, GID 0). `cargo
 * xtask conform` runs it on any device under tools/../uverbs-trace: on an
 * Ethernet (RoCE) port every address vector carries a global route from
 * GID_INDEX, which RoCE requires; on InfiniBand the sequence is the one
 * the emulator's comparison was made with.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "scenario.h"

#define ALL_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
		    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

static struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *scq,
			      struct ibv_cq *rcq, enum ibv_qp_type type,
			      struct ibv_srq *srq)
{
	struct ibv_qp_init_attr init = {
		.send_cq = scq,
		.recv_cq = rcq,
		.srq = srq,
		.cap = {
			.max_send_wr = 16,
			.max_recv_wr = srq ? 0 : 32,
			.max_send_sge = 3,
			.max_recv_sge = srq ? 0 : 2,
			.max_inline_data = 64,
		},
		.qp_type = type,
	};

	return check_ptr("qps", ibv_create_qp(pd, &init));
}

/* The port's link layer is Ethernet (RoCE): address vectors need a GRH. */
static int roce;
static union ibv_gid gid;
static int gid_index;

/* A global route to our own GID, as RoCE requires. */
static void set_grh(struct ibv_ah_attr *ah)
{
	ah->is_global = 1;
	ah->grh.dgid = gid;
	ah->grh.sgid_index = gid_index;
	ah->grh.hop_limit = 64;
}

/* RESET -> INIT -> RTR -> RTS towards `dest` (RC, UC). */
static void connect_qp(struct ibv_qp *qp, uint32_t dest, uint16_t lid)
{
	int rc = qp->qp_type == IBV_QPT_RC;
	struct ibv_qp_attr a;
	int mask;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	if (rc)
		a.qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	check_ret("connect", ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
						   IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = 0x123;
	a.ah_attr.dlid = lid;
	a.ah_attr.sl = 0;
	a.ah_attr.port_num = 1;
	if (roce)
		set_grh(&a.ah_attr);
	mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
	       IBV_QP_RQ_PSN;
	if (rc) {
		a.max_dest_rd_atomic = 4;
		a.min_rnr_timer = 12;
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	}
	check_ret("connect", ibv_modify_qp(qp, &a, mask));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0x456;
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (rc) {
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 4;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			IBV_QP_MAX_QP_RD_ATOMIC;
	}
	check_ret("connect", ibv_modify_qp(qp, &a, mask));
}

/* RESET -> INIT -> RTR -> RTS of a UD QP. */
static void ready_ud(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = 1;
	a.qkey = 0x11111111;
	check_ret("ud", ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
					      IBV_QP_PORT | IBV_QP_QKEY));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	check_ret("ud", ibv_modify_qp(qp, &a, IBV_QP_STATE));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0x789;
	check_ret("ud", ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN));
}

int main(int argc, char **argv)
{
	const char *name = argc > 1 ? argv[1] : "mlx5_0";
	struct ibv_device *found = NULL;
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_device_attr_ex dev;
	struct ibv_port_attr port;
	struct ibv_pd *pd;
	struct ibv_mr *mr[3];
	void *buf[3];
	size_t len[3] = { 1 << 16, 1 << 20, 1 << 12 };
	int access[3] = { IBV_ACCESS_LOCAL_WRITE, ALL_ACCESS,
			  IBV_ACCESS_REMOTE_READ };
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq, *cq2;
	struct ibv_srq *srq;
	struct ibv_srq_attr sattr;
	struct ibv_qp *qp[8];
	struct ibv_qp_attr qattr;
	struct ibv_qp_init_attr qinit;
	struct ibv_ah *ah[2];
	int n, i;

	if (argc > 2)
		gid_index = atoi(argv[2]);
	list = check_ptr("open", ibv_get_device_list(&n));
	for (i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			found = list[i];
	if (!found)
		fail("open", "no such device");
	ctx = check_ptr("open", ibv_open_device(found));
	ibv_free_device_list(list);
	pass("open");

	check_ret("query", ibv_query_device_ex(ctx, NULL, &dev));
	check_ret("query", ibv_query_port(ctx, 1, &port));
	check_ret("query", ibv_query_gid(ctx, 1, gid_index, &gid));
	roce = port.link_layer == IBV_LINK_LAYER_ETHERNET;
	pass("query");

	pd = check_ptr("pd", ibv_alloc_pd(ctx));
	pass("pd");

	for (i = 0; i < 3; i++) {
		buf[i] = check_ptr("mrs", aligned_alloc(4096, len[i]));
		memset(buf[i], 0, len[i]);
		mr[i] = check_ptr("mrs", ibv_reg_mr(pd, buf[i], len[i], access[i]));
	}
	pass("mrs");

	ch = check_ptr("cqs", ibv_create_comp_channel(ctx));
	cq = check_ptr("cqs", ibv_create_cq(ctx, 64, NULL, NULL, 0));
	cq2 = check_ptr("cqs", ibv_create_cq(ctx, 100, NULL, ch, 0));
	pass("cqs");

	{
		struct ibv_srq_init_attr sia = { .attr = { .max_wr = 16, .max_sge = 2 } };

		srq = check_ptr("srq", ibv_create_srq(pd, &sia));
	}
	memset(&sattr, 0, sizeof(sattr));
	sattr.srq_limit = 4;
	check_ret("srq", ibv_modify_srq(srq, &sattr, IBV_SRQ_LIMIT));
	check_ret("srq", ibv_query_srq(srq, &sattr));
	expect("srq", sattr.srq_limit == 4, "srq_limit is not 4");
	pass("srq");

	/* RC pair, UC pair, UD pair, RC pair on the SRQ. */
	qp[0] = make_qp(pd, cq, cq2, IBV_QPT_RC, NULL);
	qp[1] = make_qp(pd, cq, cq2, IBV_QPT_RC, NULL);
	qp[2] = make_qp(pd, cq, cq, IBV_QPT_UC, NULL);
	qp[3] = make_qp(pd, cq, cq, IBV_QPT_UC, NULL);
	qp[4] = make_qp(pd, cq, cq, IBV_QPT_UD, NULL);
	qp[5] = make_qp(pd, cq, cq, IBV_QPT_UD, NULL);
	qp[6] = make_qp(pd, cq, cq, IBV_QPT_RC, srq);
	qp[7] = make_qp(pd, cq, cq, IBV_QPT_RC, srq);
	pass("qps");

	for (i = 0; i < 8; i += 2) {
		if (qp[i]->qp_type == IBV_QPT_UD) {
			ready_ud(qp[i]);
			ready_ud(qp[i + 1]);
		} else {
			connect_qp(qp[i], qp[i + 1]->qp_num, port.lid);
			connect_qp(qp[i + 1], qp[i]->qp_num, port.lid);
		}
	}
	pass("connect");

	check_ret("query_qp", ibv_query_qp(qp[0], &qattr, 0x1fffff, &qinit));
	expect("query_qp", qattr.qp_state == IBV_QPS_RTS, "QP 0 is not in RTS");
	pass("query_qp");

	{
		struct ibv_ah_attr aa = { .dlid = port.lid, .sl = 1, .port_num = 1 };

		/* Without a global route where the link layer allows it. */
		if (roce) {
			set_grh(&aa);
			aa.grh.hop_limit = 1;
		}
		ah[0] = check_ptr("ahs", ibv_create_ah(pd, &aa));
		aa.is_global = 1;
		aa.grh.dgid = gid;
		aa.grh.sgid_index = gid_index;
		aa.grh.hop_limit = 64;
		aa.grh.traffic_class = 0;
		aa.grh.flow_label = 0;
		ah[1] = check_ptr("ahs", ibv_create_ah(pd, &aa));
	}
	pass("ahs");

	check_ret("resize", ibv_resize_cq(cq2, 256));
	expect("resize", cq2->cqe >= 256, "the CQ did not grow");
	pass("resize");

	for (i = 0; i < 2; i++)
		check_ret("destroy", ibv_destroy_ah(ah[i]));
	for (i = 0; i < 8; i++)
		check_ret("destroy", ibv_destroy_qp(qp[i]));
	check_ret("destroy", ibv_destroy_srq(srq));
	check_ret("destroy", ibv_destroy_cq(cq2));
	check_ret("destroy", ibv_destroy_cq(cq));
	check_ret("destroy", ibv_destroy_comp_channel(ch));
	for (i = 0; i < 3; i++) {
		check_ret("destroy", ibv_dereg_mr(mr[i]));
		free(buf[i]);
	}
	check_ret("destroy", ibv_dealloc_pd(pd));
	check_ret("destroy", ibv_close_device(ctx));
	pass("destroy");
	return 0;
}
