/*
 * EFA direct verbs from a C program, on rdma-core's libibverbs + libefa
 * and on ours: cargo xtask efa runs it (linked with -lefa -libverbs) on the
 * emulated EFA device on both, and cargo xtask ibverbs links it with
 * -static against our libefa.a and libibverbs.a
 * (target/ibverbs/<profile>/efadv_static), which the VM runs on rxe.
 *
 * usage: efadv_probe [DEV] (default: the first device)
 * On an EFA device: efadv_query_device answers the device's limits, an SRD
 * QP is made with efadv_create_driver_qp and with efadv_create_qp_ex and
 * taken to RTS, an AH's number comes from efadv_query_ah, and a CQ with the
 * sender's GID from efadv_create_cq has a wc_read_sgid. On any other
 * device (a vendor id other than Amazon's) every efadv_* call answers
 * EOPNOTSUPP, as libefa answers for a device that is not EFA. Prints "PASS <step>" per step, "FAIL <step>:
 * <why>" and exits 1 on the first failure.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/efadv.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail(const char *step, const char *why)
{
	printf("FAIL %s: %s (errno %d: %s)\n", step, why, errno, strerror(errno));
	exit(1);
}

static void pass(const char *step)
{
	printf("PASS %s\n", step);
}

static void to_rts(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11111111 };

	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		fail("srd_to_rts", "INIT");
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		fail("srd_to_rts", "RTR");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		fail("srd_to_rts", "RTS");
}

/* Every efadv_* call on a device that is not EFA: EOPNOTSUPP. */
static void not_efa(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct efadv_device_attr ea;

	if (efadv_query_device(ctx, &ea, sizeof(ea)) != EOPNOTSUPP)
		fail("efadv_query_device", "not EOPNOTSUPP on a device that is not EFA");
	pass("efadv_query_device");
	struct ibv_qp_init_attr qa = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_DRIVER,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	errno = 0;
	if (efadv_create_driver_qp(pd, &qa, EFADV_QP_DRIVER_TYPE_SRD) || errno != EOPNOTSUPP)
		fail("efadv_create_driver_qp", "not NULL with EOPNOTSUPP on a device that is not EFA");
	pass("efadv_create_driver_qp");
	struct ibv_cq_init_attr_ex cqa = { .cqe = 8, .wc_flags = IBV_WC_STANDARD_FLAGS };
	struct efadv_cq_init_attr ecqa = { .wc_flags = EFADV_WC_EX_WITH_SGID };
	errno = 0;
	if (efadv_create_cq(ctx, &cqa, &ecqa, sizeof(ecqa)) || errno != EOPNOTSUPP)
		fail("efadv_create_cq", "not NULL with EOPNOTSUPP on a device that is not EFA");
	pass("efadv_create_cq");
}

static void efa(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct efadv_device_attr ea;

	if (efadv_query_device(ctx, &ea, sizeof(ea)))
		fail("efadv_query_device", "failed");
	if (!ea.max_sq_wr || !ea.max_rq_wr || !ea.max_sq_sge || !ea.max_rq_sge)
		fail("efadv_query_device", "zero limits");
	/* Too short for inline_buf_size: EINVAL. */
	if (efadv_query_device(ctx, &ea, 8) != EINVAL)
		fail("efadv_query_device", "a short inlen was not EINVAL");
	pass("efadv_query_device");

	struct ibv_qp_init_attr qa = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_DRIVER,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = efadv_create_driver_qp(pd, &qa, EFADV_QP_DRIVER_TYPE_SRD);
	if (!qp)
		fail("efadv_create_driver_qp", "failed");
	to_rts(qp);
	pass("efadv_create_driver_qp");
	pass("srd_to_rts");

	struct ibv_qp_init_attr_ex xa = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_DRIVER,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_SEND,
	};
	struct efadv_qp_init_attr exa = { .driver_qp_type = EFADV_QP_DRIVER_TYPE_SRD };
	struct ibv_qp *xq = efadv_create_qp_ex(ctx, &xa, &exa, sizeof(exa));
	if (!xq || !ibv_qp_to_qp_ex(xq))
		fail("efadv_create_qp_ex", "no SRD QP with the builder");
	exa.comp_mask = 1;
	errno = 0;
	if (efadv_create_qp_ex(ctx, &xa, &exa, sizeof(exa)) || errno != EINVAL)
		fail("efadv_create_qp_ex", "a comp_mask was not EINVAL");
	pass("efadv_create_qp_ex");

	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, 0, &gid))
		fail("efadv_query_ah", "query_gid");
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1, .grh = { .dgid = gid, .hop_limit = 1 } };
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	if (!ah)
		fail("efadv_query_ah", "create_ah");
	struct efadv_ah_attr eah;
	if (efadv_query_ah(ah, &eah, sizeof(eah)))
		fail("efadv_query_ah", "failed");
	pass("efadv_query_ah");

	struct ibv_cq_init_attr_ex cqa = { .cqe = 8, .wc_flags = IBV_WC_STANDARD_FLAGS };
	struct efadv_cq_init_attr ecqa = { .wc_flags = EFADV_WC_EX_WITH_SGID };
	struct ibv_cq_ex *cqx = efadv_create_cq(ctx, &cqa, &ecqa, sizeof(ecqa));
	if (!cqx || !efadv_cq_from_ibv_cq_ex(cqx) || !efadv_cq_from_ibv_cq_ex(cqx)->wc_read_sgid)
		fail("efadv_create_cq", "no CQ with wc_read_sgid");
	ecqa.wc_flags = 1u << 7;
	errno = 0;
	if (efadv_create_cq(ctx, &cqa, &ecqa, sizeof(ecqa)) || errno != EOPNOTSUPP)
		fail("efadv_create_cq", "an unknown wc_flags bit was not EOPNOTSUPP");
	pass("efadv_create_cq");

	if (ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)) || ibv_destroy_ah(ah) || ibv_destroy_qp(xq) ||
	    ibv_destroy_qp(qp))
		fail("teardown", "destroy");
}

int main(int argc, char **argv)
{
	if (argc > 2) {
		fprintf(stderr, "usage: efadv_probe [DEV]\n");
		return 2;
	}
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_device *dev = NULL;

	for (int i = 0; list && i < n; i++)
		if (!dev && (argc < 2 || !strcmp(ibv_get_device_name(list[i]), argv[1])))
			dev = list[i];
	if (!dev)
		fail("open", "no such device");
	struct ibv_context *ctx = ibv_open_device(dev);
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	struct ibv_cq *cq = pd ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;

	if (!cq)
		fail("open", "context, PD or CQ");
	pass("open");
	struct ibv_device_attr da;

	if (ibv_query_device(ctx, &da))
		fail("open", "query_device");
	/* Amazon's PCI vendor id: an EFA device. */
	if (da.vendor_id == 0x1d0f)
		efa(ctx, pd, cq);
	else
		not_efa(ctx, pd, cq);
	if (ibv_destroy_cq(cq) || ibv_dealloc_pd(pd) || ibv_close_device(ctx))
		fail("teardown", "destroy");
	ibv_free_device_list(list);
	pass("teardown");
	return 0;
}
