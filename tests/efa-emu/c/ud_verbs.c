/*
 * Test-only scenario for the EFA emulator (tests/efa-emu): UD through the
 * plain verbs API only (no efadv), so that it runs unchanged on
 * rdma-core's libibverbs + libefa and on our libibverbs.so.1 (`cargo
 * xtask efa` runs it on both, with the emulator preloaded):
 *
 *   gcc -O2 -Wall -Wextra -Werror ud_verbs.c -libverbs -o ud_verbs
 *
 * Two UD QPs on one CQ: a datagram of two buffers, one of inline data
 * with immediate data, one to the wrong Q_Key (dropped, the send still
 * succeeds), an unknown lkey (a protection error), the flush of a QP in
 * ERR. Prints "PASS <step>" per step; on the first failure "FAIL
 * <step>: <reason>" and exits 1.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "efa_scenario.h"

#define QKEY EFA_QKEY

static struct ibv_cq *cq;
static struct ibv_mr *mr;
static char *buf;

static struct ibv_qp *ud_qp(const char *step, struct ibv_pd *pd)
{
	struct ibv_qp_init_attr qa = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2,
			 .max_recv_sge = 1, .max_inline_data = 32 },
		.qp_type = IBV_QPT_UD,
	};
	struct ibv_qp *qp = check_ptr(step, ibv_create_qp(pd, &qa));

	efa_to_rts(step, qp, 0, -1);
	return qp;
}

static void recv1(const char *step, struct ibv_qp *qp, uint64_t id)
{
	struct ibv_sge s = { (uintptr_t)buf + 1000, 64, mr->lkey };

	efa_post_recv(step, qp, &s, 1, id);
}

static void send1(const char *step, struct ibv_qp *qp, struct ibv_ah *ah, uint32_t qpn,
		  uint32_t qkey, struct ibv_sge *sg, int n, int flags, uint64_t id)
{
	/* An inline send carries immediate data too. */
	const uint32_t imm = 0x5151;

	efa_post_send(step, qp, ah, qpn, qkey, sg, n, flags, id,
		      (flags & IBV_SEND_INLINE) ? &imm : NULL);
}

int main(void)
{
	struct ibv_device **list;
	struct ibv_device *dev = efa_device("setup", &list);
	struct ibv_context *ctx = check_ptr("setup", ibv_open_device(dev));
	struct ibv_pd *pd = check_ptr("setup", ibv_alloc_pd(ctx));
	buf = calloc(1, 8192);
	mr = check_ptr("setup", ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE));
	cq = check_ptr("setup", ibv_create_cq(ctx, 16, NULL, NULL, 0));
	union ibv_gid gid;
	check_ret("setup", ibv_query_gid(ctx, 1, 0, &gid));
	struct ibv_ah_attr aha = { .is_global = 1, .port_num = 1 };
	aha.grh.dgid = gid;
	struct ibv_ah *ah = check_ptr("setup", ibv_create_ah(pd, &aha));
	struct ibv_qp *a = ud_qp("setup", pd), *b = ud_qp("setup", pd);
	pass("setup");

	memcpy(buf, "plain ", 6);
	memcpy(buf + 100, "verbs", 6);
	struct ibv_sge two[2] = { { (uintptr_t)buf, 6, mr->lkey },
				  { (uintptr_t)buf + 100, 6, mr->lkey } };
	recv1("two_buffers", b, 1);
	send1("two_buffers", a, ah, b->qp_num, QKEY, two, 2, 0, 2);
	struct ibv_wc w1 = efa_poll1("two_buffers", cq), w2 = efa_poll1("two_buffers", cq);
	struct ibv_wc rw = w1.opcode == IBV_WC_RECV ? w1 : w2;
	struct ibv_wc sw = w1.opcode == IBV_WC_RECV ? w2 : w1;
	efa_wc_is("two_buffers", sw, IBV_WC_SUCCESS, 2);
	efa_wc_is("two_buffers", rw, IBV_WC_SUCCESS, 1);
	expect("two_buffers", rw.byte_len == 12 && !strcmp(buf + 1000, "plain verbs"),
	       "the datagram did not arrive intact");
	expect("two_buffers", rw.src_qp == a->qp_num, "src_qp");
	pass("two_buffers");

	recv1("inline_imm", b, 3);
	send1("inline_imm", a, ah, b->qp_num, QKEY, two, 1, IBV_SEND_INLINE, 4);
	w1 = efa_poll1("inline_imm", cq);
	w2 = efa_poll1("inline_imm", cq);
	rw = w1.opcode == IBV_WC_RECV ? w1 : w2;
	sw = w1.opcode == IBV_WC_RECV ? w2 : w1;
	efa_wc_is("inline_imm", sw, IBV_WC_SUCCESS, 4);
	efa_wc_is("inline_imm", rw, IBV_WC_SUCCESS, 3);
	expect("inline_imm", (rw.wc_flags & IBV_WC_WITH_IMM) && be32toh(rw.imm_data) == 0x5151,
	       "immediate data");
	pass("inline_imm");

	recv1("wrong_qkey", b, 5);
	send1("wrong_qkey", a, ah, b->qp_num, QKEY + 1, two, 1, 0, 6);
	efa_wc_is("wrong_qkey", efa_poll1("wrong_qkey", cq), IBV_WC_SUCCESS, 6);
	efa_quiet("wrong_qkey", cq);
	pass("wrong_qkey");

	struct ibv_sge bad = { (uintptr_t)buf, 6, mr->lkey + 0x100 };
	send1("bad_lkey", a, ah, b->qp_num, QKEY, &bad, 1, 0, 7);
	efa_wc_is("bad_lkey", efa_poll1("bad_lkey", cq), IBV_WC_LOC_PROT_ERR, 7);
	pass("bad_lkey");

	struct ibv_qp_attr ea = { .qp_state = IBV_QPS_ERR };
	check_ret("flush", ibv_modify_qp(b, &ea, IBV_QP_STATE));
	efa_wc_is("flush", efa_poll1("flush", cq), IBV_WC_WR_FLUSH_ERR, 5);
	efa_quiet("flush", cq);
	pass("flush");

	check_ret("teardown", ibv_destroy_qp(a));
	check_ret("teardown", ibv_destroy_qp(b));
	check_ret("teardown", ibv_destroy_ah(ah));
	check_ret("teardown", ibv_destroy_cq(cq));
	check_ret("teardown", ibv_dereg_mr(mr));
	check_ret("teardown", ibv_dealloc_pd(pd));
	check_ret("teardown", ibv_close_device(ctx));
	ibv_free_device_list(list);
	free(buf);
	pass("teardown");
	return 0;
}
