/*
 * Test-only scenario for the mlx5 emulator (tests/mlx5-emu): a FIXED
 * sequence of objects and work requests through unmodified rdma-core
 * (libibverbs + libmlx5). Run with MLX5_EMU_WQE_LOG=<path>, the emulator
 * records every WQE libmlx5 wrote; tests/src/bin/mlx5_wqe_seq.rs posts
 * the same sequence through our provider and `cargo xtask mlx5` compares
 * both logs byte for byte (tools/xtask/src/wqe_compare.rs). Any change
 * here must be mirrored there, in the same order.
 *
 * After every post it waits for the completions it causes, so the HCA has
 * consumed the WQEs before the next post (the log order is deterministic).
 * Prints "PASS <step>" per step, "FAIL <step>: <reason>" and exit 1 on the
 * first failure. Every wait is bounded.
 */
#include <endian.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

#include "scenario.h"

#define BUF_SIZE (1 << 20)
#define TIMEOUT_MS 2000
#define UD_QKEY 0x11111111u

/* Offsets in the one registered buffer. */
#define SRC 0x00000
#define DST 0x40000
#define RCV 0x80000
#define ATOM 0xF0000

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_mr *mr;
static struct ibv_cq *cq;
static uint8_t *buf;
static uint16_t lid;

/* Waits for exactly `n` successful completions on the one CQ. */
static void wait_n(const char *step, int n)
{
	long end = now_ms() + TIMEOUT_MS;
	struct ibv_wc wc;
	char why[128];
	int got = 0, r;

	while (got < n) {
		r = ibv_poll_cq(cq, 1, &wc);
		if (r < 0)
			fail(step, "ibv_poll_cq failed");
		if (r == 1) {
			if (wc.status != IBV_WC_SUCCESS) {
				snprintf(why, sizeof(why), "wr_id %llu: %s",
					 (unsigned long long)wc.wr_id,
					 ibv_wc_status_str(wc.status));
				fail(step, why);
			}
			got++;
		} else if (now_ms() > end) {
			fail(step, "timed out waiting for completions");
		}
	}
	/* Nothing more may arrive. */
	end = now_ms() + 20;
	while (now_ms() < end)
		if (ibv_poll_cq(cq, 1, &wc) != 0)
			fail(step, "unexpected extra completion");
}

static struct ibv_qp *make_qp(enum ibv_qp_type type, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr init = {
		.send_cq = cq,
		.recv_cq = cq,
		.srq = srq,
		.cap = {
			.max_send_wr = 16,
			.max_recv_wr = srq ? 0 : 16,
			.max_send_sge = 3,
			.max_recv_sge = srq ? 0 : 2,
			.max_inline_data = 128,
		},
		.qp_type = type,
	};

	return check_ptr("create_qp", ibv_create_qp(pd, &init));
}

static struct ibv_sge sge(size_t off, uint32_t len)
{
	struct ibv_sge s = {
		.addr = (uintptr_t)(buf + off),
		.length = len,
		.lkey = mr->lkey,
	};
	return s;
}

/* A receive of one SGE (len1) or two (len1, len2) at RCV. */
static void recv_on(const char *step, struct ibv_qp *qp, struct ibv_srq *srq,
		    uint64_t wr_id, uint32_t len1, uint32_t len2)
{
	struct ibv_sge s[2] = { sge(RCV, len1), sge(RCV + 0x1000, len2) };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = s,
				  .num_sge = len2 ? 2 : 1 }, *bad;

	if (srq)
		check_ret(step, ibv_post_srq_recv(srq, &wr, &bad));
	else
		check_ret(step, ibv_post_recv(qp, &wr, &bad));
}

/* One send WR with up to 3 SGEs. */
struct wr_desc {
	uint64_t wr_id;
	enum ibv_wr_opcode opcode;
	unsigned flags;
	uint32_t imm;
	size_t loff[3];
	uint32_t len[3];
	int nsge;
	size_t roff;
	uint64_t add_swap, compare;
};

static void fill_wr(struct ibv_send_wr *wr, struct ibv_sge *s,
		    const struct wr_desc *d)
{
	int i;

	memset(wr, 0, sizeof(*wr));
	for (i = 0; i < d->nsge; i++)
		s[i] = sge(d->loff[i], d->len[i]);
	wr->wr_id = d->wr_id;
	wr->sg_list = s;
	wr->num_sge = d->nsge;
	wr->opcode = d->opcode;
	wr->send_flags = d->flags;
	wr->imm_data = htobe32(d->imm);
	if (d->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
	    d->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr->wr.atomic.remote_addr = (uintptr_t)(buf + d->roff);
		wr->wr.atomic.rkey = mr->rkey;
		wr->wr.atomic.compare_add = d->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ?
						    d->compare : d->add_swap;
		wr->wr.atomic.swap = d->add_swap;
	} else {
		wr->wr.rdma.remote_addr = (uintptr_t)(buf + d->roff);
		wr->wr.rdma.rkey = mr->rkey;
	}
}

/* Posts one WR on `qp` and waits for `n` completions. */
static void post1(const char *step, struct ibv_qp *qp, const struct wr_desc *d, int n)
{
	struct ibv_send_wr wr, *bad;
	struct ibv_sge s[3];

	fill_wr(&wr, s, d);
	check_ret(step, ibv_post_send(qp, &wr, &bad));
	wait_n(step, n);
	pass(step);
}

#define SIG IBV_SEND_SIGNALED

int main(void)
{
	struct ibv_device **list;
	struct ibv_port_attr port;
	struct ibv_qp *qa, *qb, *ua, *ub, *da, *db, *sa, *sb;
	struct ibv_srq *srq;
	struct ibv_ah *ah;
	int n, i, r;

	list = check_ptr("open", ibv_get_device_list(&n));
	if (n < 1 || strcmp(ibv_get_device_name(list[0]), "mlx5_0"))
		fail("open", "mlx5_0 is not the first device");
	ctx = check_ptr("open", ibv_open_device(list[0]));
	ibv_free_device_list(list);
	check_ret("open", ibv_query_port(ctx, 1, &port));
	lid = port.lid;
	pd = check_ptr("pd", ibv_alloc_pd(ctx));
	buf = check_ptr("mr", aligned_alloc(4096, BUF_SIZE));
	memset(buf, 0, BUF_SIZE);
	for (i = 0; i < 0x1000; i++)
		buf[SRC + i] = (uint8_t)(i * 7 + 3);
	mr = check_ptr("mr", ibv_reg_mr(pd, buf, BUF_SIZE,
					IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC));
	cq = check_ptr("cq", ibv_create_cq(ctx, 64, NULL, NULL, 0));
	/* Creation order: RC pair, UC pair, UD pair, SRQ, RC pair on the SRQ. */
	qa = make_qp(IBV_QPT_RC, NULL);
	qb = make_qp(IBV_QPT_RC, NULL);
	ua = make_qp(IBV_QPT_UC, NULL);
	ub = make_qp(IBV_QPT_UC, NULL);
	da = make_qp(IBV_QPT_UD, NULL);
	db = make_qp(IBV_QPT_UD, NULL);
	{
		struct ibv_srq_init_attr sia = { .attr = { .max_wr = 16, .max_sge = 2 } };

		srq = check_ptr("srq", ibv_create_srq(pd, &sia));
	}
	sa = make_qp(IBV_QPT_RC, srq);
	sb = make_qp(IBV_QPT_RC, srq);
	connect_rc(qa, qb->qp_num, lid, 7);
	connect_rc(qb, qa->qp_num, lid, 7);
	connect_rc(ua, ub->qp_num, lid, 7);
	connect_rc(ub, ua->qp_num, lid, 7);
	connect_ud(da, UD_QKEY);
	connect_ud(db, UD_QKEY);
	connect_rc(sa, sb->qp_num, lid, 7);
	connect_rc(sb, sa->qp_num, lid, 7);
	{
		struct ibv_ah_attr aa = { .dlid = lid, .port_num = 1 };

		ah = check_ptr("ah", ibv_create_ah(pd, &aa));
	}
	pass("objects");

	/* RC, qa -> qb. */
	recv_on("send_signaled", qb, NULL, 100, 256, 0);
	post1("send_signaled", qa, &(struct wr_desc){ .wr_id = 1, .opcode = IBV_WR_SEND,
		.flags = SIG, .loff = { SRC }, .len = { 64 }, .nsge = 1 }, 2);
	recv_on("send_unsignaled", qb, NULL, 101, 128, 128);
	post1("send_unsignaled", qa, &(struct wr_desc){ .wr_id = 2, .opcode = IBV_WR_SEND,
		.loff = { SRC + 8 }, .len = { 200 }, .nsge = 1 }, 1);
	recv_on("send_imm", qb, NULL, 102, 256, 0);
	post1("send_imm", qa, &(struct wr_desc){ .wr_id = 3, .opcode = IBV_WR_SEND_WITH_IMM,
		.flags = SIG, .imm = 0x12345678, .loff = { SRC }, .len = { 32 }, .nsge = 1 }, 2);
	post1("write", qa, &(struct wr_desc){ .wr_id = 4, .opcode = IBV_WR_RDMA_WRITE,
		.flags = SIG, .loff = { SRC }, .len = { 300 }, .nsge = 1, .roff = DST }, 1);
	recv_on("write_imm", qb, NULL, 103, 16, 0);
	post1("write_imm", qa, &(struct wr_desc){ .wr_id = 5, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
		.flags = SIG, .imm = 0xabcdef01, .loff = { SRC }, .len = { 100 }, .nsge = 1,
		.roff = DST + 0x400 }, 2);
	post1("read", qa, &(struct wr_desc){ .wr_id = 6, .opcode = IBV_WR_RDMA_READ,
		.flags = SIG, .loff = { SRC + 0x2000 }, .len = { 128 }, .nsge = 1, .roff = DST }, 1);
	post1("cas", qa, &(struct wr_desc){ .wr_id = 7, .opcode = IBV_WR_ATOMIC_CMP_AND_SWP,
		.flags = SIG, .loff = { SRC + 0x3000 }, .len = { 8 }, .nsge = 1, .roff = ATOM,
		.compare = 0, .add_swap = 0x1122334455667788ull }, 1);
	post1("faa", qa, &(struct wr_desc){ .wr_id = 8, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
		.flags = SIG, .loff = { SRC + 0x3008 }, .len = { 8 }, .nsge = 1, .roff = ATOM,
		.add_swap = 5 }, 1);
	recv_on("inline_send", qb, NULL, 104, 256, 0);
	post1("inline_send", qa, &(struct wr_desc){ .wr_id = 9, .opcode = IBV_WR_SEND,
		.flags = SIG | IBV_SEND_INLINE, .loff = { SRC, SRC + 0x100 }, .len = { 20, 13 },
		.nsge = 2 }, 2);
	post1("inline_write", qa, &(struct wr_desc){ .wr_id = 10, .opcode = IBV_WR_RDMA_WRITE,
		.flags = SIG | IBV_SEND_INLINE, .loff = { SRC }, .len = { 64 }, .nsge = 1,
		.roff = DST + 0x800 }, 1);
	recv_on("multi_sge", qb, NULL, 105, 256, 0);
	post1("multi_sge", qa, &(struct wr_desc){ .wr_id = 11, .opcode = IBV_WR_SEND,
		.flags = SIG, .loff = { SRC, SRC + 0x40, SRC + 0x80 }, .len = { 16, 0, 24 },
		.nsge = 3 }, 2);
	post1("fence", qa, &(struct wr_desc){ .wr_id = 12, .opcode = IBV_WR_RDMA_WRITE,
		.flags = SIG | IBV_SEND_FENCE, .loff = { SRC }, .len = { 8 }, .nsge = 1,
		.roff = DST + 0xc00 }, 1);
	recv_on("solicited", qb, NULL, 106, 256, 0);
	post1("solicited", qa, &(struct wr_desc){ .wr_id = 13, .opcode = IBV_WR_SEND,
		.flags = SIG | IBV_SEND_SOLICITED, .loff = { SRC }, .len = { 4 }, .nsge = 1 }, 2);
	{
		struct ibv_send_wr w[3], *bad;
		struct ibv_sge s[3][3];

		for (i = 0; i < 3; i++) {
			fill_wr(&w[i], s[i], &(struct wr_desc){ .wr_id = 20 + i,
				.opcode = IBV_WR_RDMA_WRITE, .flags = i == 2 ? SIG : 0,
				.loff = { SRC + 0x10 * i }, .len = { 16 }, .nsge = 1,
				.roff = DST + 0x1000 + 0x10 * i });
			w[i].next = i < 2 ? &w[i + 1] : NULL;
		}
		check_ret("chain", ibv_post_send(qa, w, &bad));
		wait_n("chain", 1);
		pass("chain");
	}
	/*
	 * 3-BB inline writes (ds 9) across two wraps of the 128-BB ring: as
	 * 3 does not divide 128, one of them starts at BB 126 or 127 of the
	 * first or the second wrap whatever the start, so its inline payload
	 * is split at the ring's end.
	 */
	for (i = 0; i < 90; i++) {
		struct ibv_send_wr wr, *bad;
		struct ibv_sge s[3];

		fill_wr(&wr, s, &(struct wr_desc){ .wr_id = 100 + i, .opcode = IBV_WR_RDMA_WRITE,
			.flags = SIG | IBV_SEND_INLINE, .loff = { SRC + i }, .len = { 100 },
			.nsge = 1, .roff = DST + 0x2000 + 0x80 * i });
		check_ret("wrap", ibv_post_send(qa, &wr, &bad));
		wait_n("wrap", 1);
	}
	pass("wrap");
	/*
	 * Chains of 12 mixing every opcode of the common path (one doorbell
	 * each), a FETCH_AND_ADD and a 2-SGE WRITE among them (no inline
	 * request: our libibverbs posts one on its own, a doorbell more);
	 * ten of them go round the ring (mlx5_wqe_seq.rs has the twin).
	 */
	for (r = 0; r < 10; r++) {
		struct ibv_send_wr w[12], *bad;
		struct ibv_sge s[12][3];

		for (i = 0; i < 3; i++)
			recv_on("mixed_chain", qb, NULL, 300 + 3 * r + i, 256, 0);
		for (i = 0; i < 12; i++) {
			struct wr_desc d = { .wr_id = 400 + 12 * r + i, .nsge = 1,
					     .loff = { SRC + 0x40 * i }, .len = { 16 + 8 * i },
					     .roff = DST + 0x3000 + 0x80 * i };

			switch (i) {
			case 2: d.opcode = IBV_WR_RDMA_WRITE_WITH_IMM; d.imm = 0x1000 + r; break;
			case 3: d.opcode = IBV_WR_SEND; break;
			case 4: d.opcode = IBV_WR_SEND_WITH_IMM; d.imm = 0x2000 + r; break;
			case 5: d.opcode = IBV_WR_RDMA_READ; break;
			case 6: d.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD; d.loff[0] = SRC + 0x3100 + 8 * r;
				d.len[0] = 8; d.roff = ATOM + 0x100 + 8 * r; d.add_swap = 1 + r; break;
			case 7: d.opcode = IBV_WR_RDMA_WRITE; d.flags = IBV_SEND_FENCE; break;
			case 8: d.opcode = IBV_WR_RDMA_WRITE; d.nsge = 2;
				d.loff[1] = SRC + 0x800; d.len[1] = 8; break;
			case 11: d.opcode = IBV_WR_RDMA_WRITE; d.flags = SIG; break;
			default: d.opcode = IBV_WR_RDMA_WRITE; break;
			}
			fill_wr(&w[i], s[i], &d);
			w[i].next = i < 11 ? &w[i + 1] : NULL;
		}
		check_ret("mixed_chain", ibv_post_send(qa, w, &bad));
		wait_n("mixed_chain", 1 + 3);
	}
	pass("mixed_chain");

	/* UC, ua -> ub. */
	recv_on("uc_send", ub, NULL, 200, 256, 0);
	post1("uc_send", ua, &(struct wr_desc){ .wr_id = 30, .opcode = IBV_WR_SEND,
		.flags = SIG, .loff = { SRC }, .len = { 48 }, .nsge = 1 }, 2);
	post1("uc_write", ua, &(struct wr_desc){ .wr_id = 31, .opcode = IBV_WR_RDMA_WRITE,
		.flags = SIG, .loff = { SRC }, .len = { 48 }, .nsge = 1, .roff = DST + 0x8000 }, 1);

	/* UD, da -> db (the receive leaves room for the 40-byte GRH area). */
	recv_on("ud_send", db, NULL, 300, 40 + 256, 0);
	{
		struct ibv_send_wr wr, *bad;
		struct ibv_sge s[3];

		fill_wr(&wr, s, &(struct wr_desc){ .wr_id = 40, .opcode = IBV_WR_SEND_WITH_IMM,
			.flags = SIG, .imm = 77, .loff = { SRC }, .len = { 200 }, .nsge = 1 });
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = db->qp_num;
		wr.wr.ud.remote_qkey = UD_QKEY;
		check_ret("ud_send", ibv_post_send(da, &wr, &bad));
		wait_n("ud_send", 2);
		pass("ud_send");
	}

	/* RC on the SRQ, sa -> sb: one receive of 1 SGE, one of 2. */
	recv_on("srq_1sge", NULL, srq, 400, 256, 0);
	post1("srq_1sge", sa, &(struct wr_desc){ .wr_id = 50, .opcode = IBV_WR_SEND,
		.flags = SIG, .loff = { SRC }, .len = { 100 }, .nsge = 1 }, 2);
	recv_on("srq_2sge", NULL, srq, 401, 64, 192);
	post1("srq_2sge", sa, &(struct wr_desc){ .wr_id = 51, .opcode = IBV_WR_SEND,
		.flags = SIG, .loff = { SRC }, .len = { 200 }, .nsge = 1 }, 2);

	check_ret("teardown", ibv_destroy_ah(ah));
	for (i = 0; i < 8; i++) {
		struct ibv_qp *q[8] = { qa, qb, ua, ub, da, db, sa, sb };

		check_ret("teardown", ibv_destroy_qp(q[i]));
	}
	check_ret("teardown", ibv_destroy_srq(srq));
	check_ret("teardown", ibv_destroy_cq(cq));
	check_ret("teardown", ibv_dereg_mr(mr));
	check_ret("teardown", ibv_dealloc_pd(pd));
	check_ret("teardown", ibv_close_device(ctx));
	free(buf);
	pass("teardown");
	return 0;
}
