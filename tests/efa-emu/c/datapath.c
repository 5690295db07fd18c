/*
 * Test-only scenario for the EFA emulator (tests/efa-emu): the data path
 * through unmodified rdma-core (libibverbs + libefa, efadv), with the
 * emulator preloaded:
 *
 *   gcc -O2 -Wall -Wextra -Werror datapath.c -libverbs -lefa -o datapath
 *   LD_PRELOAD=.../libefa_emu.so ./datapath
 *
 * UD and SRD sends (gathered from two buffers, inline, with immediate
 * data), RDMA READ through the ibv_wr_* API, completions over several
 * passes of a small CQ (the phase bit), the source GID of a completion
 * (efadv_wc_read_sgid), and what fails with which status: an unknown
 * lkey, a receive too short, SRD without a receive (RNR), a UD datagram
 * with the wrong Q_Key (dropped), and a QP moved to ERR (flushed).
 * Prints "PASS <step>" per step; on the first failure "FAIL <step>:
 * <reason>" and exits 1.
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
#define BUF 8192
#define WAIT_MS 5000

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_mr *mr;
static char *buf;
static union ibv_gid gid;

static void post_recv(const char *step, struct ibv_qp *qp, uint64_t off, uint32_t len,
		      uint64_t wr_id)
{
	struct ibv_sge sge = { (uintptr_t)buf + off, len, mr->lkey };

	efa_post_recv(step, qp, &sge, 1, wr_id);
}

static void post_send(const char *step, struct ibv_qp *qp, struct ibv_ah *ah,
		      uint32_t qpn, uint32_t qkey, struct ibv_sge *sge, int nsge,
		      int flags, uint64_t wr_id, int imm)
{
	const uint32_t imm_data = 0xabcd0123;

	efa_post_send(step, qp, ah, qpn, qkey, sge, nsge, flags, wr_id, imm ? &imm_data : NULL);
}

/*
 * Polls `cqx` (extended) until the completion of `wr_id`, which must have
 * succeeded, and returns what efadv_wc_read_sgid answers for it (into
 * `sgid` if not NULL).
 */
static int poll_sgid(const char *step, struct ibv_cq_ex *cqx, uint64_t wr_id,
		     union ibv_gid *sgid)
{
	struct ibv_poll_cq_attr pa = {};
	union ibv_gid g;
	long end = now_ms() + WAIT_MS;

	while (now_ms() < end) {
		if (ibv_start_poll(cqx, &pa))
			continue;
		int ret = -1, found = 0;
		do {
			if (cqx->wr_id == wr_id) {
				expect(step, cqx->status == IBV_WC_SUCCESS, "status");
				ret = efadv_wc_read_sgid(efadv_cq_from_ibv_cq_ex(cqx), &g);
				found = 1;
			}
		} while (ibv_next_poll(cqx) == 0);
		ibv_end_poll(cqx);
		if (found) {
			if (sgid)
				*sgid = g;
			return ret;
		}
	}
	fail(step, "no receive completion");
	return -1;
}

static struct ibv_qp *make_qp(const char *step, struct ibv_cq *cq, enum ibv_qp_type t,
			      int rnr_retry)
{
	struct ibv_qp_init_attr qa = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16,
			 .max_send_sge = 2, .max_recv_sge = 1,
			 .max_inline_data = 32 },
		.qp_type = t,
	};
	struct ibv_qp *qp = t == IBV_QPT_DRIVER ?
		efadv_create_driver_qp(pd, &qa, EFADV_QP_DRIVER_TYPE_SRD) :
		ibv_create_qp(pd, &qa);
	check_ptr(step, qp);
	efa_to_rts(step, qp, 0, rnr_retry);
	return qp;
}

int main(void)
{
	struct ibv_device **list;
	struct ibv_device *dev = efa_device("setup", &list);
	ctx = check_ptr("setup", ibv_open_device(dev));
	pd = check_ptr("setup", ibv_alloc_pd(ctx));
	buf = calloc(1, BUF);
	mr = check_ptr("setup", ibv_reg_mr(pd, buf, BUF, IBV_ACCESS_LOCAL_WRITE |
						       IBV_ACCESS_REMOTE_READ));
	check_ret("setup", ibv_query_gid(ctx, 1, 0, &gid));
	struct ibv_ah_attr aha = { .is_global = 1, .port_num = 1 };
	aha.grh.dgid = gid;
	struct ibv_ah *ah = check_ptr("setup", ibv_create_ah(pd, &aha));
	struct ibv_cq *cq = check_ptr("setup", ibv_create_cq(ctx, 8, NULL, NULL, 0));
	pass("setup");

	/* UD: a datagram gathered from two buffers. */
	struct ibv_qp *ua = make_qp("ud_send", cq, IBV_QPT_UD, -1);
	struct ibv_qp *ub = make_qp("ud_send", cq, IBV_QPT_UD, -1);
	memcpy(buf, "hello, ", 7);
	memcpy(buf + 100, "efa", 4);
	post_recv("ud_send", ub, 1000, 64, 77);
	struct ibv_sge two[2] = { { (uintptr_t)buf, 7, mr->lkey },
				  { (uintptr_t)buf + 100, 4, mr->lkey } };
	post_send("ud_send", ua, ah, ub->qp_num, QKEY, two, 2, 0, 1, 0);
	struct ibv_wc w1 = efa_poll1("ud_send", cq), w2 = efa_poll1("ud_send", cq);
	struct ibv_wc rw = w1.opcode == IBV_WC_RECV ? w1 : w2;
	struct ibv_wc sw = w1.opcode == IBV_WC_RECV ? w2 : w1;
	efa_wc_is("ud_send", sw, IBV_WC_SUCCESS, 1);
	efa_wc_is("ud_send", rw, IBV_WC_SUCCESS, 77);
	expect("ud_send", rw.byte_len == 11 && !strcmp(buf + 1000, "hello, efa"),
	       "the datagram did not arrive intact");
	expect("ud_send", rw.src_qp == ua->qp_num, "src_qp");
	expect("ud_send", rw.qp_num == ub->qp_num, "qp_num");
	pass("ud_send");

	/* UD with the wrong Q_Key: dropped, the send still succeeds. */
	post_recv("ud_wrong_qkey", ub, 1000, 64, 78);
	post_send("ud_wrong_qkey", ua, ah, ub->qp_num, QKEY + 1, two, 2, 0, 2, 0);
	efa_wc_is("ud_wrong_qkey", efa_poll1("ud_wrong_qkey", cq), IBV_WC_SUCCESS, 2);
	efa_quiet("ud_wrong_qkey", cq);
	pass("ud_wrong_qkey");

	/* SRD: inline with immediate data, into the receive still posted. */
	struct ibv_qp *sa = make_qp("srd_inline_imm", cq, IBV_QPT_DRIVER, 7);
	struct ibv_qp *sb = make_qp("srd_inline_imm", cq, IBV_QPT_DRIVER, 0);
	post_recv("srd_inline_imm", sb, 2000, 64, 90);
	memcpy(buf + 200, "inline!", 8);
	struct ibv_sge in = { (uintptr_t)buf + 200, 8, mr->lkey };
	post_send("srd_inline_imm", sa, ah, sb->qp_num, QKEY, &in, 1, IBV_SEND_INLINE, 3, 1);
	w1 = efa_poll1("srd_inline_imm", cq);
	w2 = efa_poll1("srd_inline_imm", cq);
	rw = w1.opcode == IBV_WC_RECV ? w1 : w2;
	sw = w1.opcode == IBV_WC_RECV ? w2 : w1;
	efa_wc_is("srd_inline_imm", sw, IBV_WC_SUCCESS, 3);
	efa_wc_is("srd_inline_imm", rw, IBV_WC_SUCCESS, 90);
	expect("srd_inline_imm", (rw.wc_flags & IBV_WC_WITH_IMM) &&
				 be32toh(rw.imm_data) == 0xabcd0123, "immediate data");
	expect("srd_inline_imm", !strcmp(buf + 2000, "inline!"), "payload");
	pass("srd_inline_imm");

	/* 40 SRD messages through a CQ of 8 entries: five passes of phase. */
	int ok = 1;
	for (int i = 0; i < 40 && ok; i++) {
		post_recv("cq_phase", sb, 3000, 64, 1000 + i);
		buf[300] = (char)i;
		struct ibv_sge one = { (uintptr_t)buf + 300, 1, mr->lkey };
		post_send("cq_phase", sa, ah, sb->qp_num, QKEY, &one, 1, 0, 2000 + i, 0);
		w1 = efa_poll1("cq_phase", cq);
		w2 = efa_poll1("cq_phase", cq);
		rw = w1.opcode == IBV_WC_RECV ? w1 : w2;
		sw = w1.opcode == IBV_WC_RECV ? w2 : w1;
		ok = rw.status == IBV_WC_SUCCESS && sw.status == IBV_WC_SUCCESS &&
		     rw.wr_id == 1000u + i && sw.wr_id == 2000u + i && buf[3000] == (char)i;
	}
	expect("cq_phase", ok, "a message or completion went wrong");
	pass("cq_phase");

	/* SRD RNR: no receive posted and RNR retry 0. */
	struct ibv_sge one = { (uintptr_t)buf + 300, 1, mr->lkey };
	post_send("srd_rnr", sb, ah, sa->qp_num, QKEY, &one, 1, 0, 5, 0);
	efa_wc_is("srd_rnr", efa_poll1("srd_rnr", cq), IBV_WC_RNR_RETRY_EXC_ERR, 5);
	pass("srd_rnr");

	/* RNR retry 7 waits for the receive. */
	post_send("srd_rnr_wait", sa, ah, sb->qp_num, QKEY, &one, 1, 0, 6, 0);
	efa_quiet("srd_rnr_wait", cq);
	post_recv("srd_rnr_wait", sb, 3000, 64, 91);
	w1 = efa_poll1("srd_rnr_wait", cq);
	w2 = efa_poll1("srd_rnr_wait", cq);
	expect("srd_rnr_wait", w1.status == IBV_WC_SUCCESS && w2.status == IBV_WC_SUCCESS,
	       "the retried send failed");
	pass("srd_rnr_wait");

	/* A receive buffer too short. */
	post_recv("srd_short_recv", sb, 3000, 4, 92);
	post_send("srd_short_recv", sa, ah, sb->qp_num, QKEY, two, 2, 0, 7, 0);
	w1 = efa_poll1("srd_short_recv", cq);
	w2 = efa_poll1("srd_short_recv", cq);
	rw = w1.opcode == IBV_WC_RECV ? w1 : w2;
	sw = w1.opcode == IBV_WC_RECV ? w2 : w1;
	efa_wc_is("srd_short_recv", rw, IBV_WC_LOC_LEN_ERR, 92);
	efa_wc_is("srd_short_recv", sw, IBV_WC_REM_INV_REQ_ERR, 7);
	pass("srd_short_recv");

	/* An unknown lkey. */
	struct ibv_sge badk = { (uintptr_t)buf, 8, mr->lkey + 0x100 };
	post_send("bad_lkey", sa, ah, sb->qp_num, QKEY, &badk, 1, 0, 8, 0);
	efa_wc_is("bad_lkey", efa_poll1("bad_lkey", cq), IBV_WC_LOC_PROT_ERR, 8);
	pass("bad_lkey");

	/* RDMA READ through the extended API, on a CQ with the source GID. */
	struct ibv_cq_init_attr_ex cqa = { .cqe = 16, .wc_flags = IBV_WC_STANDARD_FLAGS };
	struct efadv_cq_init_attr ecqa = { .wc_flags = EFADV_WC_EX_WITH_SGID };
	struct ibv_cq_ex *cqx = check_ptr("rdma_read", efadv_create_cq(ctx, &cqa, &ecqa, sizeof(ecqa)));
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
	struct ibv_qp *xq = check_ptr("rdma_read", efadv_create_qp_ex(ctx, &xa, &exa, sizeof(exa)));
	efa_to_rts("rdma_read", xq, 0, 7);
	struct ibv_qp_ex *qpx = ibv_qp_to_qp_ex(xq);
	for (int i = 0; i < 256; i++)
		buf[4096 + i] = (char)(i * 7);
	memset(buf + 5000, 0, 256);
	ibv_wr_start(qpx);
	qpx->wr_id = 9;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_read(qpx, mr->rkey, (uintptr_t)buf + 4096);
	ibv_wr_set_sge(qpx, mr->lkey, (uintptr_t)buf + 5000, 256);
	ibv_wr_set_ud_addr(qpx, ah, xq->qp_num, QKEY);
	check_ret("rdma_read", ibv_wr_complete(qpx));
	struct ibv_poll_cq_attr pa = {};
	long end = now_ms() + WAIT_MS;
	int r;
	while ((r = ibv_start_poll(cqx, &pa)) == ENOENT && now_ms() < end)
		;
	expect("rdma_read", r == 0, "no completion");
	expect("rdma_read", cqx->status == IBV_WC_SUCCESS && cqx->wr_id == 9, "status");
	ibv_end_poll(cqx);
	expect("rdma_read", !memcmp(buf + 4096, buf + 5000, 256), "the data read differ");
	pass("rdma_read");

	/*
	 * The source GID of a receive completion: only when the receiver has
	 * no AH for the sender (libefa's rule). Here it has one (the same
	 * context): none; from another context, which has no AH: the GID.
	 */
	ibv_wr_start(qpx);
	qpx->wr_id = 10;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	struct ibv_recv_wr rwr = { .wr_id = 93 };
	struct ibv_sge rs = { (uintptr_t)buf + 6000, 64, mr->lkey };
	rwr.sg_list = &rs;
	rwr.num_sge = 1;
	struct ibv_recv_wr *rbad;
	check_ret("wc_read_sgid", ibv_post_recv(xq, &rwr, &rbad));
	ibv_wr_send(qpx);
	ibv_wr_set_sge(qpx, mr->lkey, (uintptr_t)buf, 7);
	ibv_wr_set_ud_addr(qpx, ah, xq->qp_num, QKEY);
	check_ret("wc_read_sgid", ibv_wr_complete(qpx));
	int sgid_ret = poll_sgid("wc_read_sgid", cqx, 93, NULL);
	expect("wc_read_sgid", sgid_ret != 0,
	       "a source GID although the receiver has an AH for the sender");

	struct ibv_context *ctx2 = check_ptr("wc_read_sgid", ibv_open_device(dev));
	struct ibv_pd *pd2 = check_ptr("wc_read_sgid", ibv_alloc_pd(ctx2));
	char *buf2 = calloc(1, 4096);
	struct ibv_mr *mr2 = check_ptr("wc_read_sgid",
				       ibv_reg_mr(pd2, buf2, 4096, IBV_ACCESS_LOCAL_WRITE));
	struct ibv_cq_ex *cqx2 = check_ptr("wc_read_sgid",
					   efadv_create_cq(ctx2, &cqa, &ecqa, sizeof(ecqa)));
	struct ibv_qp_init_attr q2a = {
		.send_cq = ibv_cq_ex_to_cq(cqx2),
		.recv_cq = ibv_cq_ex_to_cq(cqx2),
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.qp_type = IBV_QPT_DRIVER,
	};
	struct ibv_qp *q2 = check_ptr("wc_read_sgid",
				      efadv_create_driver_qp(pd2, &q2a, EFADV_QP_DRIVER_TYPE_SRD));
	efa_to_rts("wc_read_sgid", q2, 0, 7);
	struct ibv_sge rs2 = { (uintptr_t)buf2, 64, mr2->lkey };
	struct ibv_recv_wr rwr2 = { .wr_id = 95, .sg_list = &rs2, .num_sge = 1 };
	check_ret("wc_read_sgid", ibv_post_recv(q2, &rwr2, &rbad));
	post_send("wc_read_sgid", sa, ah, q2->qp_num, QKEY, two, 2, 0, 11, 0);
	union ibv_gid sgid;
	sgid_ret = poll_sgid("wc_read_sgid", cqx2, 95, &sgid);
	expect("wc_read_sgid", sgid_ret == 0, "no source GID from a sender without an AH");
	expect("wc_read_sgid", !memcmp(&sgid, &gid, 16), "wrong source GID");
	expect("wc_read_sgid", !strcmp(buf2, "hello, efa"), "payload across contexts");
	efa_wc_is("wc_read_sgid", efa_poll1("wc_read_sgid", cq), IBV_WC_SUCCESS, 11);
	check_ret("wc_read_sgid", ibv_destroy_qp(q2));
	check_ret("wc_read_sgid", ibv_destroy_cq(ibv_cq_ex_to_cq(cqx2)));
	check_ret("wc_read_sgid", ibv_dereg_mr(mr2));
	check_ret("wc_read_sgid", ibv_dealloc_pd(pd2));
	check_ret("wc_read_sgid", ibv_close_device(ctx2));
	free(buf2);
	pass("wc_read_sgid");

	/*
	 * ERR flushes what is posted: the receive the dropped datagram left
	 * (78), then this one.
	 */
	post_recv("flush", ub, 1000, 64, 94);
	struct ibv_qp_attr ea = { .qp_state = IBV_QPS_ERR };
	check_ret("flush", ibv_modify_qp(ub, &ea, IBV_QP_STATE));
	efa_wc_is("flush", efa_poll1("flush", cq), IBV_WC_WR_FLUSH_ERR, 78);
	efa_wc_is("flush", efa_poll1("flush", cq), IBV_WC_WR_FLUSH_ERR, 94);
	efa_quiet("flush", cq);
	pass("flush");

	check_ret("teardown", ibv_destroy_qp(xq));
	check_ret("teardown", ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)));
	check_ret("teardown", ibv_destroy_qp(sa));
	check_ret("teardown", ibv_destroy_qp(sb));
	check_ret("teardown", ibv_destroy_qp(ua));
	check_ret("teardown", ibv_destroy_qp(ub));
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
