/*
 * Test-only: a fixed sequence of verbs on the emulated EFA device through
 * rdma-core (libibverbs + libefa), which tests/src/bin/efa_cmd_seq.rs
 * makes through rverbs, call for call. `cargo xtask efa` runs both with
 * EFA_EMU_CMD_LOG and EFA_EMU_DESC_LOG set and compares the commands and
 * the descriptors the device saw. Prints "PASS <step>" per step; on the
 * first failure "FAIL <step>: <reason>" and exits 1.
 *
 * The sequence: open efa_0; a PD; an MR of 64 KiB; a CQ of 64 entries; a
 * UD and an SRD QP (16 send and receive requests, 2 send SGEs, 1 receive
 * SGE, 32 inline bytes), each to RTS (P_Key 0, port 1, Q_Key 0x11111111,
 * SQ PSN 0), the SRD QP then given RNR retry 7; an AH to the port's GID;
 * on the SRD QP a receive, a SEND of two buffers, a SEND of 8 inline
 * bytes with immediate data, an RDMA READ of 256 bytes (ibv_wr_*: libefa
 * has it nowhere else); on the UD QP a receive and a SEND with immediate
 * data; every completion polled; everything destroyed.
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

static void wait_n(const char *step, struct ibv_cq *cq, int n)
{
	struct ibv_wc wc;
	long end = now_ms() + 5000;

	while (n > 0) {
		int got = ibv_poll_cq(cq, 1, &wc);
		if (got < 0)
			fail(step, "poll failed");
		if (got == 1) {
			if (wc.status != IBV_WC_SUCCESS)
				fail(step, ibv_wc_status_str(wc.status));
			n--;
		} else if (now_ms() > end) {
			fail(step, "no completion within 5 s");
		}
	}
}

int main(void)
{
	struct ibv_device **list;
	struct ibv_device *dev = efa_device("open", &list);
	struct ibv_context *ctx = check_ptr("open", ibv_open_device(dev));
	pass("open");
	struct ibv_pd *pd = check_ptr("objects", ibv_alloc_pd(ctx));
	char *buf = aligned_alloc(4096, 65536);
	memset(buf, 0, 65536);
	struct ibv_mr *mr = check_ptr("objects", ibv_reg_mr(pd, buf, 65536,
							   IBV_ACCESS_LOCAL_WRITE |
								   IBV_ACCESS_REMOTE_READ));
	struct ibv_cq *cq = check_ptr("objects", ibv_create_cq(ctx, 64, NULL, NULL, 0));
	struct ibv_qp_init_attr qa = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2,
			 .max_recv_sge = 1, .max_inline_data = 32 },
		.qp_type = IBV_QPT_UD,
	};
	struct ibv_qp *ud = check_ptr("objects", ibv_create_qp(pd, &qa));
	struct ibv_qp_init_attr_ex xa = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = qa.cap,
		.qp_type = IBV_QPT_DRIVER,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
				  IBV_QP_EX_WITH_RDMA_READ,
	};
	struct efadv_qp_init_attr exa = { .driver_qp_type = EFADV_QP_DRIVER_TYPE_SRD };
	struct ibv_qp *srd = check_ptr("objects", efadv_create_qp_ex(ctx, &xa, &exa, sizeof(exa)));
	efa_to_rts("objects", ud, 0, -1);
	efa_to_rts("objects", srd, 0, -1);
	struct ibv_qp_attr ra = { .rnr_retry = 7 };
	check_ret("objects", ibv_modify_qp(srd, &ra, IBV_QP_RNR_RETRY));
	union ibv_gid gid;
	check_ret("objects", ibv_query_gid(ctx, 1, 0, &gid));
	struct ibv_ah_attr aha = { .is_global = 1, .port_num = 1 };
	aha.grh.dgid = gid;
	aha.grh.hop_limit = 1;
	struct ibv_ah *ah = check_ptr("objects", ibv_create_ah(pd, &aha));
	pass("objects");

	struct ibv_recv_wr *rbad;
	struct ibv_send_wr *sbad;
	struct ibv_sge rs = { (uintptr_t)buf + 8192, 1024, mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = &rs, .num_sge = 1 };
	check_ret("srd", ibv_post_recv(srd, &rwr, &rbad));
	rwr.wr_id = 2;
	check_ret("srd", ibv_post_recv(srd, &rwr, &rbad));
	memcpy(buf, "two buffers", 12);
	struct ibv_sge two[2] = { { (uintptr_t)buf, 4, mr->lkey },
				  { (uintptr_t)buf + 4, 8, mr->lkey } };
	struct ibv_send_wr sw = {
		.wr_id = 10, .sg_list = two, .num_sge = 2, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	};
	sw.wr.ud.ah = ah;
	sw.wr.ud.remote_qpn = srd->qp_num;
	sw.wr.ud.remote_qkey = QKEY;
	check_ret("srd", ibv_post_send(srd, &sw, &sbad));
	struct ibv_sge in = { (uintptr_t)buf + 100, 8, mr->lkey };
	memcpy(buf + 100, "inline!", 8);
	sw.wr_id = 11;
	sw.sg_list = &in;
	sw.num_sge = 1;
	sw.opcode = IBV_WR_SEND_WITH_IMM;
	sw.imm_data = htobe32(0x1234);
	sw.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	check_ret("srd", ibv_post_send(srd, &sw, &sbad));
	wait_n("srd", cq, 4);
	struct ibv_qp_ex *qpx = ibv_qp_to_qp_ex(srd);
	ibv_wr_start(qpx);
	qpx->wr_id = 12;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_read(qpx, mr->rkey, (uintptr_t)buf + 4096);
	ibv_wr_set_sge(qpx, mr->lkey, (uintptr_t)buf + 12288, 256);
	ibv_wr_set_ud_addr(qpx, ah, srd->qp_num, QKEY);
	check_ret("srd", ibv_wr_complete(qpx));
	wait_n("srd", cq, 1);
	pass("srd");

	rwr.wr_id = 3;
	check_ret("ud", ibv_post_recv(ud, &rwr, &rbad));
	sw.wr_id = 13;
	sw.sg_list = two;
	sw.num_sge = 1;
	sw.opcode = IBV_WR_SEND_WITH_IMM;
	sw.send_flags = IBV_SEND_SIGNALED;
	sw.wr.ud.remote_qpn = ud->qp_num;
	check_ret("ud", ibv_post_send(ud, &sw, &sbad));
	wait_n("ud", cq, 2);
	pass("ud");

	check_ret("teardown", ibv_destroy_ah(ah));
	check_ret("teardown", ibv_destroy_qp(srd));
	check_ret("teardown", ibv_destroy_qp(ud));
	check_ret("teardown", ibv_destroy_cq(cq));
	check_ret("teardown", ibv_dereg_mr(mr));
	check_ret("teardown", ibv_dealloc_pd(pd));
	check_ret("teardown", ibv_close_device(ctx));
	ibv_free_device_list(list);
	free(buf);
	pass("teardown");
	return 0;
}
