/*
 * Test-only scenario for the EFA emulator (tests/efa-emu): the control
 * path of every object EFA has, through unmodified rdma-core (libibverbs
 * + libefa, efadv), with the emulator preloaded:
 *
 *   gcc -O2 -Wall -Wextra -Werror objects.c -libverbs -lefa -o objects
 *   LD_PRELOAD=.../libefa_emu.so ./objects
 *
 * Device and EFA attributes, PD, MR, CQ (plain and with the source GID),
 * UD and SRD QPs (efadv_create_driver_qp, efadv_create_qp_ex) taken to
 * RTS, AHs with the device's address handle (efadv_query_ah), queries,
 * teardown; and what EFA refuses (RC QPs, SRQs, too many SGEs, remote
 * atomic access). Prints "PASS <step>" per step; on the first failure
 * "FAIL <step>: <reason>" and exits 1.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/efadv.h>
#include <infiniband/verbs.h>

#include "efa_scenario.h"

#define QKEY EFA_QKEY
#define BUF_SIZE 65536

int main(void)
{
	struct ibv_device **list;
	struct ibv_device *dev = efa_device("device", &list);
	pass("device");

	struct ibv_context *ctx = check_ptr("open", ibv_open_device(dev));
	pass("open");

	struct ibv_device_attr_ex da;
	check_ret("query_device_ex", ibv_query_device_ex(ctx, NULL, &da));
	expect("query_device_ex", da.orig_attr.vendor_id == 0x1d0f, "vendor");
	expect("query_device_ex", da.orig_attr.max_sge_rd == 1, "max_sge_rd");
	pass("query_device_ex");

	struct efadv_device_attr ea;
	check_ret("efadv_query_device", efadv_query_device(ctx, &ea, sizeof(ea)));
	expect("efadv_query_device", ea.max_sq_sge == 2 && ea.max_rq_sge == 1,
	       "sge limits");
	expect("efadv_query_device", ea.inline_buf_size == 32, "inline_buf_size");
	expect("efadv_query_device", ea.max_rdma_size == 1u << 30, "max_rdma_size");
	expect("efadv_query_device",
	       (ea.device_caps & (EFADV_DEVICE_ATTR_CAPS_RDMA_READ |
				  EFADV_DEVICE_ATTR_CAPS_RNR_RETRY |
				  EFADV_DEVICE_ATTR_CAPS_CQ_WITH_SGID)) ==
		       (EFADV_DEVICE_ATTR_CAPS_RDMA_READ |
			EFADV_DEVICE_ATTR_CAPS_RNR_RETRY |
			EFADV_DEVICE_ATTR_CAPS_CQ_WITH_SGID),
	       "device_caps");
	pass("efadv_query_device");

	struct ibv_port_attr pa;
	check_ret("query_port", ibv_query_port(ctx, 1, &pa));
	expect("query_port", pa.state == IBV_PORT_ACTIVE, "port not active");
	expect("query_port", pa.max_msg_sz == 8928, "max_msg_sz");
	pass("query_port");

	union ibv_gid gid;
	check_ret("query_gid", ibv_query_gid(ctx, 1, 0, &gid));
	expect("query_gid", gid.raw[0] == 0xfe && gid.raw[1] == 0x80, "gid");
	pass("query_gid");

	struct ibv_pd *pd = check_ptr("alloc_pd", ibv_alloc_pd(ctx));
	pass("alloc_pd");

	char *buf = calloc(1, BUF_SIZE);
	struct ibv_mr *mr = check_ptr(
		"reg_mr", ibv_reg_mr(pd, buf, BUF_SIZE,
				     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
					     IBV_ACCESS_REMOTE_WRITE));
	expect("reg_mr", mr->lkey == mr->rkey, "lkey != rkey");
	pass("reg_mr");

	errno = 0;
	struct ibv_mr *bad = ibv_reg_mr(pd, buf, BUF_SIZE,
					IBV_ACCESS_LOCAL_WRITE |
						IBV_ACCESS_REMOTE_ATOMIC);
	expect("reg_mr_atomic_refused", bad == NULL && errno == EOPNOTSUPP,
	       "remote atomic access was not refused with EOPNOTSUPP");
	pass("reg_mr_atomic_refused");

	struct ibv_cq *cq = check_ptr("create_cq", ibv_create_cq(ctx, 100, NULL, NULL, 0));
	expect("create_cq", cq->cqe >= 100, "cqe");
	pass("create_cq");

	struct ibv_cq_init_attr_ex cqa = { .cqe = 64, .wc_flags = IBV_WC_STANDARD_FLAGS };
	struct efadv_cq_init_attr ecqa = { .wc_flags = EFADV_WC_EX_WITH_SGID };
	struct ibv_cq_ex *cqx = check_ptr("efadv_create_cq",
					  efadv_create_cq(ctx, &cqa, &ecqa, sizeof(ecqa)));
	expect("efadv_create_cq", efadv_cq_from_ibv_cq_ex(cqx) != NULL, "no efadv cq");
	pass("efadv_create_cq");

	struct ibv_qp_init_attr qa = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 64, .max_recv_wr = 64,
			 .max_send_sge = 2, .max_recv_sge = 1,
			 .max_inline_data = 32 },
		.qp_type = IBV_QPT_UD,
	};
	struct ibv_qp *ud = check_ptr("create_qp_ud", ibv_create_qp(pd, &qa));
	efa_to_rts("ud_to_rts", ud, 0x123, -1);
	pass("create_qp_ud");
	pass("ud_to_rts");

	struct ibv_qp_init_attr sa = qa;
	sa.qp_type = IBV_QPT_DRIVER;
	struct ibv_qp *srd = check_ptr("efadv_create_driver_qp",
				       efadv_create_driver_qp(pd, &sa, EFADV_QP_DRIVER_TYPE_SRD));
	efa_to_rts("srd_to_rts", srd, 0x123, 7);
	pass("efadv_create_driver_qp");
	pass("srd_to_rts");

	struct ibv_qp_attr qattr;
	struct ibv_qp_init_attr qinit;
	check_ret("query_qp", ibv_query_qp(srd, &qattr, IBV_QP_STATE | IBV_QP_QKEY |
						       IBV_QP_SQ_PSN | IBV_QP_CAP, &qinit));
	expect("query_qp", qattr.qp_state == IBV_QPS_RTS, "state");
	expect("query_qp", qattr.qkey == QKEY && qattr.sq_psn == 0x123, "qkey/psn");
	pass("query_qp");

	struct ibv_qp_init_attr_ex xa = {
		.send_cq = ibv_cq_ex_to_cq(cqx),
		.recv_cq = ibv_cq_ex_to_cq(cqx),
		.cap = { .max_send_wr = 16, .max_recv_wr = 16,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_DRIVER,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_READ,
	};
	struct efadv_qp_init_attr exa = { .driver_qp_type = EFADV_QP_DRIVER_TYPE_SRD };
	struct ibv_qp *srdx = check_ptr("efadv_create_qp_ex",
					efadv_create_qp_ex(ctx, &xa, &exa, sizeof(exa)));
	expect("efadv_create_qp_ex", ibv_qp_to_qp_ex(srdx) != NULL, "no qp_ex");
	efa_to_rts("efadv_create_qp_ex", srdx, 0x123, -1);
	pass("efadv_create_qp_ex");

	struct ibv_ah_attr aha = { .is_global = 1, .port_num = 1 };
	aha.grh.dgid = gid;
	struct ibv_ah *ah = check_ptr("create_ah", ibv_create_ah(pd, &aha));
	struct ibv_ah *ah2 = check_ptr("create_ah", ibv_create_ah(pd, &aha));
	struct efadv_ah_attr eah, eah2;
	check_ret("efadv_query_ah", efadv_query_ah(ah, &eah, sizeof(eah)));
	check_ret("efadv_query_ah", efadv_query_ah(ah2, &eah2, sizeof(eah2)));
	expect("efadv_query_ah", eah.ahn == eah2.ahn,
	       "two AHs to one GID got different address handles");
	pass("create_ah");
	pass("efadv_query_ah");

	/* What EFA refuses. */
	struct ibv_qp_init_attr ra = qa;
	ra.qp_type = IBV_QPT_RC;
	errno = 0;
	expect("rc_refused", ibv_create_qp(pd, &ra) == NULL && errno == EOPNOTSUPP,
	       "an RC QP was not refused with EOPNOTSUPP");
	pass("rc_refused");

	struct ibv_srq_init_attr srqa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	errno = 0;
	expect("srq_refused", ibv_create_srq(pd, &srqa) == NULL && errno == EOPNOTSUPP,
	       "an SRQ was not refused with EOPNOTSUPP");
	pass("srq_refused");

	struct ibv_qp_init_attr ga = qa;
	ga.cap.max_send_sge = 3;
	errno = 0;
	expect("sge_refused", ibv_create_qp(pd, &ga) == NULL && errno == EINVAL,
	       "3 send SGEs were not refused with EINVAL");
	pass("sge_refused");

	struct ibv_qp_attr rattr = { .rnr_retry = 3 };
	expect("ud_rnr_retry_refused", ibv_modify_qp(ud, &rattr, IBV_QP_RNR_RETRY) != 0,
	       "RNR retry on a UD QP was accepted");
	pass("ud_rnr_retry_refused");

	expect("dealloc_busy_pd", ibv_dealloc_pd(pd) == EBUSY, "a PD in use was freed");
	pass("dealloc_busy_pd");

	check_ret("teardown", ibv_destroy_ah(ah2));
	check_ret("teardown", ibv_destroy_ah(ah));
	check_ret("teardown", ibv_destroy_qp(srdx));
	check_ret("teardown", ibv_destroy_qp(srd));
	check_ret("teardown", ibv_destroy_qp(ud));
	check_ret("teardown", ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)));
	check_ret("teardown", ibv_destroy_cq(cq));
	check_ret("teardown", ibv_dereg_mr(mr));
	check_ret("teardown", ibv_dealloc_pd(pd));
	check_ret("teardown", ibv_close_device(ctx));
	pass("teardown");
	ibv_free_device_list(list);
	free(buf);
	return 0;
}
