/*
 * Test-only scenario for the mlx5 emulator (tests/mlx5-emu): object
 * creation, modification, queries and teardown through unmodified
 * rdma-core (libibverbs + libmlx5), run with the emulator preloaded:
 *
 *   gcc -O2 -Wall -Wextra -Werror objects.c -libverbs -o objects
 *   LD_PRELOAD=.../libmlx5_emu.so ./objects
 *
 * Prints "PASS <step>" per step; on the first failure prints
 * "FAIL <step>: <reason>" and exits 1. Exits 0 only if every step passed.
 * Without the emulator there is no mlx5_0 and the first step fails.
 */
#include <endian.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "scenario.h"

#define BUF_SIZE 65536
#define RC_RQ_PSN 0x123
#define RC_SQ_PSN 0x456
#define UD_QKEY 0x11111111u
#define SRQ_LIMIT 4

/* check_ret, and the step passed. */
static void step_ret(const char *step, int ret)
{
	check_ret(step, ret);
	pass(step);
}

/* check_ptr, and the step passed. */
static void *step_ptr(const char *step, void *p)
{
	check_ptr(step, p);
	pass(step);
	return p;
}

static struct ibv_qp *create_qp(struct ibv_pd *pd, enum ibv_qp_type type,
				struct ibv_cq *scq, struct ibv_cq *rcq,
				struct ibv_srq *srq)
{
	struct ibv_qp_init_attr init = {
		.send_cq = scq,
		.recv_cq = rcq,
		.srq = srq,
		.cap = {
			.max_send_wr = 16,
			.max_recv_wr = srq ? 0 : 16,
			.max_send_sge = 1,
			.max_recv_sge = srq ? 0 : 1,
		},
		.qp_type = type,
	};

	return ibv_create_qp(pd, &init);
}

/* RESET -> INIT -> RTR -> RTS for a connected QP (RC or UC). */
static void connect_qp(const char *name, struct ibv_qp *qp, int rc,
		       uint32_t dest_qpn, uint16_t dlid, uint32_t rq_psn,
		       uint32_t sq_psn, int access)
{
	char step[64];
	struct ibv_qp_attr a;
	int mask;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = 1;
	a.qp_access_flags = access;
	snprintf(step, sizeof(step), "%s_to_init", name);
	step_ret(step, ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
					      IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest_qpn;
	a.rq_psn = rq_psn;
	a.ah_attr.dlid = dlid;
	a.ah_attr.port_num = 1;
	mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
	       IBV_QP_RQ_PSN;
	if (rc) {
		a.max_dest_rd_atomic = 4;
		a.min_rnr_timer = 12;
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	}
	snprintf(step, sizeof(step), "%s_to_rtr", name);
	step_ret(step, ibv_modify_qp(qp, &a, mask));

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = sq_psn;
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (rc) {
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 4;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			IBV_QP_MAX_QP_RD_ATOMIC;
	}
	snprintf(step, sizeof(step), "%s_to_rts", name);
	step_ret(step, ibv_modify_qp(qp, &a, mask));
}

int main(void)
{
	const int rc_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			      IBV_ACCESS_REMOTE_READ;
	const int uc_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	struct ibv_device **list;
	struct ibv_device *dev = NULL;
	struct ibv_context *ctx;
	struct ibv_device_attr dattr;
	struct ibv_port_attr pattr;
	union ibv_gid gid;
	struct ibv_pd *pd;
	struct ibv_mr *mr, *bad_mr;
	struct ibv_comp_channel *chan;
	struct ibv_cq *cq_a, *cq_b;
	struct ibv_srq *srq;
	struct ibv_srq_init_attr srq_init;
	struct ibv_srq_attr srq_attr;
	struct ibv_qp *rc, *uc, *ud;
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qinit;
	struct ibv_ah_attr ah_attr;
	struct ibv_ah *ah;
	uint16_t lid;
	void *buf;
	int n, i, ret;

	/* Discovery and device queries. */
	errno = 0;
	list = ibv_get_device_list(&n);
	if (!list)
		fail("devices", strerror(errno ? errno : ENODEV));
	for (i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), "mlx5_0"))
			dev = list[i];
	if (!dev) {
		char why[64];

		snprintf(why, sizeof(why), "no mlx5_0 among %d device(s)", n);
		fail("devices", why);
	}
	pass("devices");

	ctx = step_ptr("open", ibv_open_device(dev));

	step_ret("query_device", ibv_query_device(ctx, &dattr));
	expect("query_device", dattr.vendor_id == 0x02c9, "vendor_id is not 0x02c9");
	expect("query_device", dattr.vendor_part_id == 4119, "vendor_part_id is not 4119");
	expect("query_device", dattr.phys_port_cnt == 1, "phys_port_cnt is not 1");
	expect("query_device", dattr.node_guid == ibv_get_device_guid(dev),
	       "node GUID differs between QUERY_DEVICE and sysfs");

	step_ret("query_port", ibv_query_port(ctx, 1, &pattr));
	expect("query_port", pattr.state == IBV_PORT_ACTIVE, "port 1 is not active");
	expect("query_port", pattr.link_layer == IBV_LINK_LAYER_INFINIBAND,
	       "link layer is not InfiniBand");
	expect("query_port", pattr.lid != 0, "port 1 has no LID");
	lid = pattr.lid;

	step_ret("query_gid", ibv_query_gid(ctx, 1, 0, &gid));
	expect("query_gid", gid.global.subnet_prefix == htobe64(0xfe80000000000000ull),
	       "GID 0 is not link-local");
	expect("query_gid", gid.global.interface_id == dattr.node_guid,
	       "GID 0 interface ID is not the node GUID");

	/* PD and MR. */
	pd = step_ptr("alloc_pd", ibv_alloc_pd(ctx));

	buf = aligned_alloc(4096, BUF_SIZE);
	if (!buf)
		fail("reg_mr", "out of memory");
	memset(buf, 0, BUF_SIZE);
	mr = step_ptr("reg_mr", ibv_reg_mr(pd, buf, BUF_SIZE, rc_access));
	expect("reg_mr", mr->lkey != 0x100 && mr->rkey != 0x100,
	       "lkey or rkey is 0x100 (libmlx5's end-of-list key)");

	errno = 0;
	bad_mr = ibv_reg_mr(pd, buf, BUF_SIZE, IBV_ACCESS_REMOTE_WRITE);
	if (bad_mr)
		fail("reg_mr_remote_write_without_local_write", "unexpectedly succeeded");
	expect("reg_mr_remote_write_without_local_write", errno == EINVAL,
	       "expected EINVAL");
	pass("reg_mr_remote_write_without_local_write");

	/* Completion channel, CQs, SRQ. */
	chan = step_ptr("create_comp_channel", ibv_create_comp_channel(ctx));
	expect("create_comp_channel", chan->fd >= 0, "no channel fd");

	cq_a = step_ptr("create_cq_with_channel", ibv_create_cq(ctx, 16, NULL, chan, 0));
	expect("create_cq_with_channel", cq_a->cqe >= 16, "fewer CQEs than asked for");
	cq_b = step_ptr("create_cq", ibv_create_cq(ctx, 16, NULL, NULL, 0));
	expect("create_cq", cq_b->cqe >= 16, "fewer CQEs than asked for");
	/* Arming writes the UAR page mapped at context creation. */
	step_ret("req_notify_cq", ibv_req_notify_cq(cq_a, 0));

	memset(&srq_init, 0, sizeof(srq_init));
	srq_init.attr.max_wr = 16;
	srq_init.attr.max_sge = 1;
	srq = step_ptr("create_srq", ibv_create_srq(pd, &srq_init));

	/* QPs. */
	rc = step_ptr("create_qp_rc", create_qp(pd, IBV_QPT_RC, cq_a, cq_b, NULL));
	uc = step_ptr("create_qp_uc", create_qp(pd, IBV_QPT_UC, cq_a, cq_b, srq));
	ud = step_ptr("create_qp_ud", create_qp(pd, IBV_QPT_UD, cq_b, cq_b, NULL));
	expect("create_qp", rc->qp_num && uc->qp_num && ud->qp_num &&
			    rc->qp_num != uc->qp_num && uc->qp_num != ud->qp_num &&
			    rc->qp_num != ud->qp_num,
	       "QP numbers are zero or not distinct");

	/* RESET -> RTS is illegal. */
	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IBV_QPS_RTS;
	qa.sq_psn = RC_SQ_PSN;
	qa.timeout = 14;
	qa.retry_cnt = 7;
	qa.rnr_retry = 7;
	qa.max_rd_atomic = 4;
	ret = ibv_modify_qp(rc, &qa, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
				     IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				     IBV_QP_MAX_QP_RD_ATOMIC);
	expect("illegal_reset_to_rts", ret == EINVAL,
	       ret ? strerror(ret) : "unexpectedly succeeded");
	step_ret("illegal_reset_to_rts_query", ibv_query_qp(rc, &qa, IBV_QP_STATE, &qinit));
	expect("illegal_reset_to_rts_query", qa.qp_state == IBV_QPS_RESET,
	       "QP left RESET after a rejected transition");
	pass("illegal_reset_to_rts");

	/* ECE: the vendor's id and what CREATE_QP granted (nothing here);
	 * setting options needs the device's ECE, which the emulator lacks. */
	{
		struct ibv_ece ece;

		memset(&ece, 0xff, sizeof(ece));
		check_ret("qp_ece", ibv_query_ece(rc, &ece));
		expect("qp_ece", ece.vendor_id == 0x15b3 && ece.options == 0 &&
				 ece.comp_mask == 0,
		       "unexpected ECE of a new QP");
		ece.vendor_id = 0x15b3;
		ret = ibv_set_ece(rc, &ece);
		expect("qp_ece", ret == EOPNOTSUPP, "set_ece without the device's ECE");
		ece.vendor_id = 0x8086;
		ret = ibv_set_ece(rc, &ece);
		expect("qp_ece", ret == EINVAL, "set_ece of another vendor's options");
		ece.vendor_id = 0;
		ret = ibv_set_ece(rc, &ece);
		expect("qp_ece", ret == EOPNOTSUPP, "set_ece without a vendor");
		pass("qp_ece");
	}

	/* RC and UC against each other; UD alone. */
	connect_qp("rc", rc, 1, uc->qp_num, lid, RC_RQ_PSN, RC_SQ_PSN, rc_access);
	connect_qp("uc", uc, 0, rc->qp_num, lid, RC_SQ_PSN, RC_RQ_PSN, uc_access);

	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IBV_QPS_INIT;
	qa.pkey_index = 0;
	qa.port_num = 1;
	qa.qkey = UD_QKEY;
	step_ret("ud_to_init", ibv_modify_qp(ud, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
						       IBV_QP_PORT | IBV_QP_QKEY));
	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IBV_QPS_RTR;
	step_ret("ud_to_rtr", ibv_modify_qp(ud, &qa, IBV_QP_STATE));
	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IBV_QPS_RTS;
	qa.sq_psn = 0;
	step_ret("ud_to_rts", ibv_modify_qp(ud, &qa, IBV_QP_STATE | IBV_QP_SQ_PSN));

	/* Attributes read back. */
	memset(&qa, 0, sizeof(qa));
	step_ret("query_qp_rc", ibv_query_qp(rc, &qa, IBV_QP_STATE | IBV_QP_DEST_QPN |
						       IBV_QP_SQ_PSN | IBV_QP_RQ_PSN |
						       IBV_QP_ACCESS_FLAGS | IBV_QP_AV |
						       IBV_QP_PATH_MTU | IBV_QP_TIMEOUT,
					      &qinit));
	expect("query_qp_rc", qa.qp_state == IBV_QPS_RTS, "state is not RTS");
	expect("query_qp_rc", qa.dest_qp_num == uc->qp_num, "dest_qp_num differs");
	expect("query_qp_rc", qa.sq_psn == RC_SQ_PSN, "sq_psn differs");
	expect("query_qp_rc", qa.rq_psn == RC_RQ_PSN, "rq_psn differs");
	expect("query_qp_rc", qa.qp_access_flags == (unsigned int)rc_access,
	       "qp_access_flags differ");
	expect("query_qp_rc", qa.ah_attr.dlid == lid, "dlid differs");
	expect("query_qp_rc", qa.path_mtu == IBV_MTU_1024, "path_mtu differs");
	expect("query_qp_rc", qa.timeout == 14, "timeout differs");

	memset(&qa, 0, sizeof(qa));
	step_ret("query_qp_ud", ibv_query_qp(ud, &qa, IBV_QP_STATE | IBV_QP_QKEY, &qinit));
	expect("query_qp_ud", qa.qp_state == IBV_QPS_RTS, "state is not RTS");
	expect("query_qp_ud", qa.qkey == UD_QKEY, "qkey differs");

	/* CQ resize, SRQ limit. */
	step_ret("resize_cq", ibv_resize_cq(cq_b, 64));
	expect("resize_cq", cq_b->cqe >= 64, "fewer CQEs than asked for");

	memset(&srq_attr, 0, sizeof(srq_attr));
	srq_attr.srq_limit = SRQ_LIMIT;
	step_ret("modify_srq", ibv_modify_srq(srq, &srq_attr, IBV_SRQ_LIMIT));
	memset(&srq_attr, 0, sizeof(srq_attr));
	step_ret("query_srq", ibv_query_srq(srq, &srq_attr));
	expect("query_srq", srq_attr.srq_limit == SRQ_LIMIT, "srq_limit differs");
	expect("query_srq", srq_attr.max_wr >= 16, "max_wr below what was asked for");

	/* Address handle. */
	memset(&ah_attr, 0, sizeof(ah_attr));
	ah_attr.dlid = lid;
	ah_attr.port_num = 1;
	ah = step_ptr("create_ah", ibv_create_ah(pd, &ah_attr));
	step_ret("destroy_ah", ibv_destroy_ah(ah));

	/* Objects in use cannot go. */
	ret = ibv_dealloc_pd(pd);
	expect("dealloc_pd_in_use", ret == EBUSY, ret ? strerror(ret) : "unexpectedly succeeded");
	pass("dealloc_pd_in_use");
	ret = ibv_destroy_cq(cq_a);
	expect("destroy_cq_in_use", ret == EBUSY, ret ? strerror(ret) : "unexpectedly succeeded");
	pass("destroy_cq_in_use");

	/* Teardown, children first. */
	step_ret("destroy_qp_ud", ibv_destroy_qp(ud));
	step_ret("destroy_qp_uc", ibv_destroy_qp(uc));
	step_ret("destroy_qp_rc", ibv_destroy_qp(rc));
	step_ret("destroy_srq", ibv_destroy_srq(srq));
	step_ret("destroy_cq", ibv_destroy_cq(cq_b));
	step_ret("destroy_cq_with_channel", ibv_destroy_cq(cq_a));
	step_ret("destroy_comp_channel", ibv_destroy_comp_channel(chan));
	step_ret("dereg_mr", ibv_dereg_mr(mr));
	step_ret("dealloc_pd", ibv_dealloc_pd(pd));
	step_ret("close", ibv_close_device(ctx));
	ibv_free_device_list(list);
	free(buf);
	pass("all");
	return 0;
}
