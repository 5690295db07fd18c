/*
 * Test-only scenario for the mlx5 emulator (tests/mlx5-emu): the data
 * path through unmodified rdma-core (libibverbs + libmlx5), executed by the
 * emulator's in-process HCA thread:
 *
 *   gcc -O2 -Wall -Wextra -Werror datapath.c -libverbs -o datapath
 *   LD_PRELOAD=.../libmlx5_emu.so ./datapath
 *
 * Prints "PASS <step>" per step; on the first failure prints
 * "FAIL <step>: <reason>" and exits 1. Exits 0 only if every step passed.
 * Every wait is bounded, so a broken emulator fails instead of hanging.
 */
#include <endian.h>
#include <errno.h>
#include <poll.h>
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

/* Polls one completion, failing the step after TIMEOUT_MS. */
static void poll_one(const char *step, struct ibv_cq *cq, struct ibv_wc *wc)
{
	long end = now_ms() + TIMEOUT_MS;
	int n;

	for (;;) {
		n = ibv_poll_cq(cq, 1, wc);
		if (n < 0)
			fail(step, "ibv_poll_cq failed");
		if (n == 1)
			return;
		if (now_ms() > end)
			fail(step, "timed out waiting for a completion");
	}
}

/* Fails the step if a completion shows up within 50 ms. */
static void expect_quiet(const char *step, struct ibv_cq *cq)
{
	long end = now_ms() + 50;
	struct ibv_wc wc;

	while (now_ms() < end)
		if (ibv_poll_cq(cq, 1, &wc) != 0)
			fail(step, "unexpected extra completion");
}

static void expect_wc(const char *step, const struct ibv_wc *wc,
		      enum ibv_wc_status status, uint64_t wr_id)
{
	char why[160];

	if (wc->status != status) {
		snprintf(why, sizeof(why), "status %s (%d), expected %s",
			 ibv_wc_status_str(wc->status), wc->status,
			 ibv_wc_status_str(status));
		fail(step, why);
	}
	if (wc->wr_id != wr_id) {
		snprintf(why, sizeof(why), "wr_id %llu, expected %llu",
			 (unsigned long long)wc->wr_id, (unsigned long long)wr_id);
		fail(step, why);
	}
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = (uint8_t)(seed * 31 + i * 7 + (i >> 8));
}

static void expect_bytes(const char *step, const uint8_t *got,
			 const uint8_t *want, size_t n)
{
	char why[96];
	size_t i;

	for (i = 0; i < n; i++)
		if (got[i] != want[i]) {
			snprintf(why, sizeof(why),
				 "byte %zu is 0x%02x, expected 0x%02x", i,
				 got[i], want[i]);
			fail(step, why);
		}
}

static struct ibv_context *ctx;

/*
 * Waits up to TIMEOUT_MS for an async event on the context's async fd and
 * reads it; the caller acks it (ibv_destroy_qp/cq wait for the acks).
 */
static void get_async_event(const char *step, struct ibv_async_event *ev)
{
	struct pollfd pfd = { .fd = ctx->async_fd, .events = POLLIN };

	if (poll(&pfd, 1, TIMEOUT_MS) != 1)
		fail(step, "no async event within the timeout");
	check_ret(step, ibv_get_async_event(ctx, ev) ? errno : 0);
}

/* Fails the step if an async event is pending within 50 ms. */
static void expect_no_async_event(const char *step)
{
	struct pollfd pfd = { .fd = ctx->async_fd, .events = POLLIN };

	expect(step, poll(&pfd, 1, 50) == 0, "unexpected async event");
}

static enum ibv_qp_state qp_state(const char *step, struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr init;

	check_ret(step, ibv_query_qp(qp, &a, IBV_QP_STATE, &init));
	return a.qp_state;
}

static struct ibv_pd *pd;
static struct ibv_mr *mr;
static uint8_t *buf;
static uint16_t lid;

static struct ibv_qp *make_qp(enum ibv_qp_type type, struct ibv_cq *cq,
			      struct ibv_srq *srq)
{
	struct ibv_qp_init_attr init = {
		.send_cq = cq,
		.recv_cq = cq,
		.srq = srq,
		.cap = {
			.max_send_wr = 64,
			.max_recv_wr = srq ? 0 : 64,
			.max_send_sge = 4,
			.max_recv_sge = srq ? 0 : 4,
			.max_inline_data = 64,
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

static void post_recv(const char *step, struct ibv_qp *qp, uint64_t wr_id,
		      struct ibv_sge *sg, int n)
{
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = sg, .num_sge = n }, *bad;

	check_ret(step, ibv_post_recv(qp, &wr, &bad));
}

static void post_send(const char *step, struct ibv_qp *qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;

	check_ret(step, ibv_post_send(qp, wr, &bad));
}

/* A write of `len` bytes from `loff` to remote offset `roff`. */
static struct ibv_send_wr write_wr(uint64_t wr_id, struct ibv_sge *s,
				   size_t roff, int flags)
{
	struct ibv_send_wr wr;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.sg_list = s;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = flags;
	wr.wr.rdma.remote_addr = (uintptr_t)(buf + roff);
	wr.wr.rdma.rkey = mr->rkey;
	return wr;
}

/* Offsets in the one registered buffer. */
#define SRC 0x00000
#define DST 0x40000
#define AUX 0x80000
#define ATOM 0xF0000

int main(void)
{
	struct ibv_device **list;
	struct ibv_device *dev = NULL;
	struct ibv_port_attr pattr;
	struct ibv_cq *cqa, *cqb, *cqs, *cqe_ev, *ev_cq;
	struct ibv_comp_channel *chan;
	struct ibv_qp *qa, *qb;
	struct ibv_wc wc;
	struct ibv_send_wr wr;
	struct ibv_sge s[4], r[4];
	void *ev_ctx;
	int n, i;

	list = ibv_get_device_list(&n);
	if (!list)
		fail("setup", "no device list");
	for (i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), "mlx5_0"))
			dev = list[i];
	if (!dev)
		fail("setup", "no mlx5_0");
	ctx = check_ptr("setup", ibv_open_device(dev));
	check_ret("setup", ibv_query_port(ctx, 1, &pattr));
	lid = pattr.lid;
	pd = check_ptr("setup", ibv_alloc_pd(ctx));
	if (posix_memalign((void **)&buf, 4096, BUF_SIZE))
		fail("setup", "posix_memalign");
	memset(buf, 0, BUF_SIZE);
	mr = check_ptr("setup", ibv_reg_mr(pd, buf, BUF_SIZE,
					   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC));
	cqa = check_ptr("setup", ibv_create_cq(ctx, 256, NULL, NULL, 0));
	cqb = check_ptr("setup", ibv_create_cq(ctx, 256, NULL, NULL, 0));
	qa = make_qp(IBV_QPT_RC, cqa, NULL);
	qb = make_qp(IBV_QPT_RC, cqb, NULL);
	connect_rc(qa, qb->qp_num, lid, 7);
	connect_rc(qb, qa->qp_num, lid, 7);
	pass("setup");

	/*
	 * ibv_query_qp's capacities are libmlx5's (mlx5_query_qp: the send
	 * ones from its own queue, the receive ones from the kernel), for
	 * make_qp's request (64 WRs, 4 SGEs each way, 64 inline bytes): RC
	 * WQEs are 320 bytes (192 of overhead, room for 124 inline bytes),
	 * 102 of them in a 32 KiB ring; UD WQEs 192 bytes (64 of overhead),
	 * 85 in 16 KiB; receive WQEs 64 bytes, 64 of them, 4 SGEs.
	 */
	{
		struct ibv_qp *ud = make_qp(IBV_QPT_UD, cqa, NULL);
		struct ibv_qp *qs[2] = { qa, ud };
		const uint32_t want[2][5] = { { 102, 64, 4, 4, 124 }, { 85, 64, 4, 4, 124 } };
		struct ibv_qp_attr a;
		struct ibv_qp_init_attr init;
		char why[160];
		int k;

		for (k = 0; k < 2; k++) {
			memset(&a, 0, sizeof(a));
			memset(&init, 0, sizeof(init));
			check_ret("query_qp_caps", ibv_query_qp(qs[k], &a, IBV_QP_CAP, &init));
			snprintf(why, sizeof(why), "%s caps %u %u %u %u %u",
				 k ? "UD" : "RC", init.cap.max_send_wr, init.cap.max_recv_wr,
				 init.cap.max_send_sge, init.cap.max_recv_sge,
				 init.cap.max_inline_data);
			expect("query_qp_caps", init.cap.max_send_wr == want[k][0] &&
				   init.cap.max_recv_wr == want[k][1] &&
				   init.cap.max_send_sge == want[k][2] &&
				   init.cap.max_recv_sge == want[k][3] &&
				   init.cap.max_inline_data == want[k][4], why);
			expect("query_qp_caps", !memcmp(&a.cap, &init.cap, sizeof(a.cap)),
			       "attr.cap differs from init_attr.cap");
		}
		check_ret("query_qp_caps", ibv_destroy_qp(ud));
	}
	pass("query_qp_caps");

	/* SEND / RECV. */
	fill(buf + SRC, 1000, 1);
	r[0] = sge(DST, 4096);
	post_recv("send_recv", qb, 11, r, 1);
	s[0] = sge(SRC, 1000);
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 10;
	wr.sg_list = s;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	post_send("send_recv", qa, &wr);
	poll_one("send_recv", cqa, &wc);
	expect_wc("send_recv", &wc, IBV_WC_SUCCESS, 10);
	expect("send_recv", wc.opcode == IBV_WC_SEND, "requester opcode is not SEND");
	poll_one("send_recv", cqb, &wc);
	expect_wc("send_recv", &wc, IBV_WC_SUCCESS, 11);
	expect("send_recv", wc.opcode == IBV_WC_RECV, "responder opcode is not RECV");
	expect("send_recv", wc.byte_len == 1000, "byte_len is not 1000");
	expect("send_recv", wc.qp_num == qb->qp_num, "qp_num is not the receiver's");
	expect("send_recv", !(wc.wc_flags & IBV_WC_WITH_IMM), "WITH_IMM set");
	expect_bytes("send_recv", buf + DST, buf + SRC, 1000);
	pass("send_recv");

	/* SEND_WITH_IMM. */
	fill(buf + SRC, 64, 2);
	post_recv("send_imm", qb, 21, r, 1);
	s[0] = sge(SRC, 64);
	wr.wr_id = 20;
	wr.opcode = IBV_WR_SEND_WITH_IMM;
	wr.imm_data = htobe32(0x12345678);
	post_send("send_imm", qa, &wr);
	poll_one("send_imm", cqa, &wc);
	expect_wc("send_imm", &wc, IBV_WC_SUCCESS, 20);
	poll_one("send_imm", cqb, &wc);
	expect_wc("send_imm", &wc, IBV_WC_SUCCESS, 21);
	expect("send_imm", wc.opcode == IBV_WC_RECV, "opcode is not RECV");
	expect("send_imm", wc.wc_flags & IBV_WC_WITH_IMM, "WITH_IMM not set");
	expect("send_imm", wc.imm_data == htobe32(0x12345678), "wrong imm_data");
	expect("send_imm", wc.byte_len == 64, "byte_len is not 64");
	expect_bytes("send_imm", buf + DST, buf + SRC, 64);
	pass("send_imm");

	/* Inline SEND. */
	{
		uint8_t inl[48];

		fill(inl, sizeof(inl), 3);
		post_recv("send_inline", qb, 31, r, 1);
		s[0].addr = (uintptr_t)inl;
		s[0].length = sizeof(inl);
		s[0].lkey = 0;
		wr.wr_id = 30;
		wr.opcode = IBV_WR_SEND;
		wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
		post_send("send_inline", qa, &wr);
		memset(inl, 0, sizeof(inl));
		poll_one("send_inline", cqa, &wc);
		expect_wc("send_inline", &wc, IBV_WC_SUCCESS, 30);
		poll_one("send_inline", cqb, &wc);
		expect_wc("send_inline", &wc, IBV_WC_SUCCESS, 31);
		expect("send_inline", wc.byte_len == 48, "byte_len is not 48");
		fill(inl, sizeof(inl), 3);
		expect_bytes("send_inline", buf + DST, inl, sizeof(inl));
	}
	pass("send_inline");

	/* A SEND with 3 SGEs into a receive with 2 SGEs. */
	fill(buf + SRC, 600, 4);
	memset(buf + DST, 0, 8192);
	r[0] = sge(DST, 250);
	r[1] = sge(DST + 4096, 400);
	post_recv("send_3_sges_to_2", qb, 41, r, 2);
	s[0] = sge(SRC, 100);
	s[1] = sge(SRC + 100, 200);
	s[2] = sge(SRC + 300, 300);
	wr.wr_id = 40;
	wr.num_sge = 3;
	wr.send_flags = IBV_SEND_SIGNALED;
	post_send("send_3_sges_to_2", qa, &wr);
	poll_one("send_3_sges_to_2", cqa, &wc);
	expect_wc("send_3_sges_to_2", &wc, IBV_WC_SUCCESS, 40);
	poll_one("send_3_sges_to_2", cqb, &wc);
	expect_wc("send_3_sges_to_2", &wc, IBV_WC_SUCCESS, 41);
	expect("send_3_sges_to_2", wc.byte_len == 600, "byte_len is not 600");
	expect_bytes("send_3_sges_to_2", buf + DST, buf + SRC, 250);
	expect_bytes("send_3_sges_to_2", buf + DST + 4096, buf + SRC + 250, 350);
	expect("send_3_sges_to_2", buf[DST + 4096 + 350] == 0, "wrote past the message");
	wr.num_sge = 1;
	pass("send_3_sges_to_2");

	/* RDMA WRITE. */
	fill(buf + SRC, 4096, 5);
	s[0] = sge(SRC, 4096);
	wr = write_wr(50, s, DST, IBV_SEND_SIGNALED);
	post_send("rdma_write", qa, &wr);
	poll_one("rdma_write", cqa, &wc);
	expect_wc("rdma_write", &wc, IBV_WC_SUCCESS, 50);
	expect("rdma_write", wc.opcode == IBV_WC_RDMA_WRITE, "opcode is not RDMA_WRITE");
	expect_bytes("rdma_write", buf + DST, buf + SRC, 4096);
	expect_quiet("rdma_write", cqb);
	pass("rdma_write");

	/* RDMA WRITE with immediate: consumes a receive. */
	fill(buf + SRC, 512, 6);
	r[0] = sge(AUX, 16);
	post_recv("rdma_write_imm", qb, 61, r, 1);
	s[0] = sge(SRC, 512);
	wr = write_wr(60, s, DST, IBV_SEND_SIGNALED);
	wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	wr.imm_data = htobe32(0xcafe);
	post_send("rdma_write_imm", qa, &wr);
	poll_one("rdma_write_imm", cqa, &wc);
	expect_wc("rdma_write_imm", &wc, IBV_WC_SUCCESS, 60);
	poll_one("rdma_write_imm", cqb, &wc);
	expect_wc("rdma_write_imm", &wc, IBV_WC_SUCCESS, 61);
	expect("rdma_write_imm", wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM,
	       "opcode is not RECV_RDMA_WITH_IMM");
	expect("rdma_write_imm", wc.imm_data == htobe32(0xcafe), "wrong imm_data");
	expect("rdma_write_imm", wc.byte_len == 512, "byte_len is not 512");
	expect_bytes("rdma_write_imm", buf + DST, buf + SRC, 512);
	pass("rdma_write_imm");

	/* RDMA READ. */
	fill(buf + DST, 2048, 7);
	memset(buf + SRC, 0, 2048);
	s[0] = sge(SRC, 2048);
	wr = write_wr(70, s, DST, IBV_SEND_SIGNALED);
	wr.opcode = IBV_WR_RDMA_READ;
	post_send("rdma_read", qa, &wr);
	poll_one("rdma_read", cqa, &wc);
	expect_wc("rdma_read", &wc, IBV_WC_SUCCESS, 70);
	expect("rdma_read", wc.opcode == IBV_WC_RDMA_READ, "opcode is not RDMA_READ");
	expect("rdma_read", wc.byte_len == 2048, "byte_len is not 2048");
	expect_bytes("rdma_read", buf + SRC, buf + DST, 2048);
	pass("rdma_read");

	/* Atomics: compare-and-swap (swap, then no swap), fetch-and-add. */
	{
		uint64_t *target = (uint64_t *)(buf + ATOM);
		uint64_t *old = (uint64_t *)(buf + ATOM + 64);

		*target = 42;
		*old = 0;
		s[0] = sge(ATOM + 64, 8);
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = 80;
		wr.sg_list = s;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
		wr.send_flags = IBV_SEND_SIGNALED;
		wr.wr.atomic.remote_addr = (uintptr_t)target;
		wr.wr.atomic.rkey = mr->rkey;
		wr.wr.atomic.compare_add = 42;
		wr.wr.atomic.swap = 99;
		post_send("cmp_swap", qa, &wr);
		poll_one("cmp_swap", cqa, &wc);
		expect_wc("cmp_swap", &wc, IBV_WC_SUCCESS, 80);
		expect("cmp_swap", wc.opcode == IBV_WC_COMP_SWAP, "opcode is not COMP_SWAP");
		expect("cmp_swap", *old == 42, "old value is not 42");
		expect("cmp_swap", *target == 99, "target was not swapped to 99");
		pass("cmp_swap");

		wr.wr_id = 81;
		wr.wr.atomic.compare_add = 1;
		wr.wr.atomic.swap = 7;
		post_send("cmp_swap_no_swap", qa, &wr);
		poll_one("cmp_swap_no_swap", cqa, &wc);
		expect_wc("cmp_swap_no_swap", &wc, IBV_WC_SUCCESS, 81);
		expect("cmp_swap_no_swap", *old == 99, "old value is not 99");
		expect("cmp_swap_no_swap", *target == 99, "target changed");
		pass("cmp_swap_no_swap");

		wr.wr_id = 82;
		wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
		wr.wr.atomic.compare_add = 5;
		post_send("fetch_add", qa, &wr);
		poll_one("fetch_add", cqa, &wc);
		expect_wc("fetch_add", &wc, IBV_WC_SUCCESS, 82);
		expect("fetch_add", wc.opcode == IBV_WC_FETCH_ADD, "opcode is not FETCH_ADD");
		expect("fetch_add", *old == 99, "old value is not 99");
		expect("fetch_add", *target == 104, "target is not 104");
		pass("fetch_add");
	}

	/* 32 unsignaled WRITEs, the last one signaled: one CQE. */
	{
		struct ibv_send_wr chain[32];
		struct ibv_sge cs[32];

		for (i = 0; i < 32; i++) {
			buf[SRC + i] = (uint8_t)(0xa0 + i);
			cs[i] = sge(SRC + i, 1);
			chain[i] = write_wr(100 + i, &cs[i], DST + 8 * i,
					    i == 31 ? IBV_SEND_SIGNALED : 0);
			chain[i].next = i == 31 ? NULL : &chain[i + 1];
		}
		post_send("unsignaled_chain", qa, chain);
		poll_one("unsignaled_chain", cqa, &wc);
		expect_wc("unsignaled_chain", &wc, IBV_WC_SUCCESS, 131);
		for (i = 0; i < 32; i++)
			expect("unsignaled_chain", buf[DST + 8 * i] == 0xa0 + i,
			       "a write did not land");
		expect_quiet("unsignaled_chain", cqa);
	}
	pass("unsignaled_chain");

	/* Enough WRs to wrap the SQ several times (1-BB WRITEs and 2-BB SENDs). */
	for (i = 0; i < 1200; i++) {
		uint64_t v = 0x1000 + i;

		memcpy(buf + SRC + 8 * (i % 16), &v, 8);
		if (i % 3 == 0) {
			s[0] = sge(SRC + 8 * (i % 16), 4);
			s[1] = sge(SRC + 8 * (i % 16) + 4, 4);
			s[2] = sge(SRC + 8 * (i % 16), 0);
			s[3] = sge(SRC + 8 * (i % 16), 8);
			r[0] = sge(AUX, 64);
			post_recv("sq_wrap", qb, 5000 + i, r, 1);
			memset(&wr, 0, sizeof(wr));
			wr.wr_id = 1000 + i;
			wr.sg_list = s;
			wr.num_sge = 4;
			wr.opcode = IBV_WR_SEND;
			wr.send_flags = IBV_SEND_SIGNALED;
		} else {
			s[0] = sge(SRC + 8 * (i % 16), 8);
			wr = write_wr(1000 + i, s, DST + 8 * (i % 16), IBV_SEND_SIGNALED);
		}
		post_send("sq_wrap", qa, &wr);
		poll_one("sq_wrap", cqa, &wc);
		expect_wc("sq_wrap", &wc, IBV_WC_SUCCESS, 1000 + i);
		if (i % 3 == 0) {
			poll_one("sq_wrap", cqb, &wc);
			expect_wc("sq_wrap", &wc, IBV_WC_SUCCESS, 5000 + i);
			expect("sq_wrap", wc.byte_len == 16, "byte_len is not 16");
			expect_bytes("sq_wrap", buf + AUX, buf + SRC + 8 * (i % 16), 8);
			expect_bytes("sq_wrap", buf + AUX + 8, buf + SRC + 8 * (i % 16), 8);
		} else {
			expect_bytes("sq_wrap", buf + DST + 8 * (i % 16),
				     buf + SRC + 8 * (i % 16), 8);
		}
	}
	pass("sq_wrap");

	/* An SRQ shared by two QPs. */
	{
		struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 2 } };
		struct ibv_srq *srq = check_ptr("srq", ibv_create_srq(pd, &sa));
		struct ibv_recv_wr rw, *bad;
		struct ibv_qp *s1, *s2, *r1, *r2;
		int seen1 = 0, seen2 = 0;

		cqs = check_ptr("srq", ibv_create_cq(ctx, 64, NULL, NULL, 0));
		s1 = make_qp(IBV_QPT_RC, cqa, NULL);
		s2 = make_qp(IBV_QPT_RC, cqa, NULL);
		r1 = make_qp(IBV_QPT_RC, cqs, srq);
		r2 = make_qp(IBV_QPT_RC, cqs, srq);
		connect_rc(s1, r1->qp_num, lid, 7);
		connect_rc(r1, s1->qp_num, lid, 7);
		connect_rc(s2, r2->qp_num, lid, 7);
		connect_rc(r2, s2->qp_num, lid, 7);
		for (i = 0; i < 4; i++) {
			r[0] = sge(AUX + 256 * i, 256);
			memset(&rw, 0, sizeof(rw));
			rw.wr_id = 200 + i;
			rw.sg_list = r;
			rw.num_sge = 1;
			check_ret("srq", ibv_post_srq_recv(srq, &rw, &bad));
		}
		for (i = 0; i < 4; i++) {
			fill(buf + SRC + 256 * i, 100 + i, 10 + i);
			s[0] = sge(SRC + 256 * i, 100 + i);
			memset(&wr, 0, sizeof(wr));
			wr.wr_id = 210 + i;
			wr.sg_list = s;
			wr.num_sge = 1;
			wr.opcode = IBV_WR_SEND;
			wr.send_flags = IBV_SEND_SIGNALED;
			post_send("srq", i % 2 ? s2 : s1, &wr);
			poll_one("srq", cqa, &wc);
			expect_wc("srq", &wc, IBV_WC_SUCCESS, 210 + i);
			poll_one("srq", cqs, &wc);
			expect_wc("srq", &wc, IBV_WC_SUCCESS, 200 + i);
			expect("srq", wc.byte_len == (uint32_t)(100 + i), "wrong byte_len");
			expect("srq", wc.qp_num == (i % 2 ? r2 : r1)->qp_num,
			       "qp_num is not the receiving QP");
			seen1 += wc.qp_num == r1->qp_num;
			seen2 += wc.qp_num == r2->qp_num;
			expect_bytes("srq", buf + AUX + 256 * i, buf + SRC + 256 * i, 100 + i);
		}
		expect("srq", seen1 == 2 && seen2 == 2, "not two receives per QP");
		pass("srq");

		/* Many more receives through the SRQ's free list, two posted
		 * ahead, alternating senders. */
		for (i = 0; i < 2; i++) {
			r[0] = sge(AUX + 256 * i, 256);
			memset(&rw, 0, sizeof(rw));
			rw.wr_id = 1000 + i;
			rw.sg_list = r;
			rw.num_sge = 1;
			check_ret("srq_reuse", ibv_post_srq_recv(srq, &rw, &bad));
		}
		for (i = 0; i < 60; i++) {
			r[0] = sge(AUX + 256 * ((i + 2) % 4), 256);
			memset(&rw, 0, sizeof(rw));
			rw.wr_id = 1000 + i + 2;
			rw.sg_list = r;
			rw.num_sge = 1;
			check_ret("srq_reuse", ibv_post_srq_recv(srq, &rw, &bad));
			fill(buf + SRC, 50, 100 + i);
			s[0] = sge(SRC, 50);
			memset(&wr, 0, sizeof(wr));
			wr.wr_id = 2000 + i;
			wr.sg_list = s;
			wr.num_sge = 1;
			wr.opcode = IBV_WR_SEND;
			wr.send_flags = IBV_SEND_SIGNALED;
			post_send("srq_reuse", i % 2 ? s2 : s1, &wr);
			poll_one("srq_reuse", cqa, &wc);
			expect_wc("srq_reuse", &wc, IBV_WC_SUCCESS, 2000 + i);
			poll_one("srq_reuse", cqs, &wc);
			expect_wc("srq_reuse", &wc, IBV_WC_SUCCESS, 1000 + i);
			expect_bytes("srq_reuse", buf + AUX + 256 * (i % 4), buf + SRC, 50);
		}
		check_ret("srq", ibv_destroy_qp(s1));
		check_ret("srq", ibv_destroy_qp(s2));
		check_ret("srq", ibv_destroy_qp(r1));
		check_ret("srq", ibv_destroy_qp(r2));
		check_ret("srq", ibv_destroy_srq(srq));
		check_ret("srq", ibv_destroy_cq(cqs));
	}
	pass("srq_reuse");

	/* UD SEND / RECV (IB link layer, no GRH: 40 bytes skipped). */
	{
		struct ibv_qp *u1 = make_qp(IBV_QPT_UD, cqa, NULL);
		struct ibv_qp *u2 = make_qp(IBV_QPT_UD, cqb, NULL);
		struct ibv_ah_attr aa = { .dlid = lid, .port_num = 1 };
		struct ibv_ah *ah;

		connect_ud(u1, UD_QKEY);
		connect_ud(u2, UD_QKEY);
		ah = check_ptr("ud", ibv_create_ah(pd, &aa));
		memset(buf + AUX, 0x5a, 40);
		fill(buf + SRC, 200, 20);
		r[0] = sge(AUX, 40 + 256);
		post_recv("ud", u2, 301, r, 1);
		s[0] = sge(SRC, 200);
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = 300;
		wr.sg_list = s;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_SEND_WITH_IMM;
		wr.imm_data = htobe32(77);
		wr.send_flags = IBV_SEND_SIGNALED;
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = u2->qp_num;
		wr.wr.ud.remote_qkey = UD_QKEY;
		post_send("ud", u1, &wr);
		poll_one("ud", cqa, &wc);
		expect_wc("ud", &wc, IBV_WC_SUCCESS, 300);
		poll_one("ud", cqb, &wc);
		expect_wc("ud", &wc, IBV_WC_SUCCESS, 301);
		expect("ud", wc.byte_len == 240, "byte_len is not 40 + 200");
		expect("ud", wc.src_qp == u1->qp_num, "src_qp is not the sender");
		expect("ud", !(wc.wc_flags & IBV_WC_GRH), "GRH flag set without a GRH");
		expect("ud", wc.wc_flags & IBV_WC_WITH_IMM, "WITH_IMM not set");
		expect("ud", wc.imm_data == htobe32(77), "wrong imm_data");
		expect("ud", buf[AUX] == 0x5a && buf[AUX + 39] == 0x5a,
		       "the GRH area was written");
		expect_bytes("ud", buf + AUX + 40, buf + SRC, 200);
		check_ret("ud", ibv_destroy_ah(ah));
		pass("ud");

		/* With a GRH in the address vector the receiver gets it. */
		{
			struct ibv_ah_attr ga = { .dlid = lid, .port_num = 1, .is_global = 1 };
			union ibv_gid gid;

			check_ret("ud_grh", ibv_query_gid(ctx, 1, 0, &gid));
			ga.grh.dgid = gid;
			ga.grh.sgid_index = 0;
			ga.grh.hop_limit = 64;
			ah = check_ptr("ud_grh", ibv_create_ah(pd, &ga));
			memset(buf + AUX, 0x5a, 40);
			post_recv("ud_grh", u2, 311, r, 1);
			wr.wr_id = 310;
			wr.opcode = IBV_WR_SEND;
			wr.wr.ud.ah = ah;
			post_send("ud_grh", u1, &wr);
			poll_one("ud_grh", cqa, &wc);
			expect_wc("ud_grh", &wc, IBV_WC_SUCCESS, 310);
			poll_one("ud_grh", cqb, &wc);
			expect_wc("ud_grh", &wc, IBV_WC_SUCCESS, 311);
			expect("ud_grh", wc.byte_len == 240, "byte_len is not 40 + 200");
			expect("ud_grh", wc.wc_flags & IBV_WC_GRH, "GRH flag not set");
			expect("ud_grh", (buf[AUX] >> 4) == 6, "GRH IP version is not 6");
			expect("ud_grh", buf[AUX + 7] == 64, "GRH hop limit is not 64");
			expect_bytes("ud_grh", buf + AUX + 8, gid.raw, 16);
			expect_bytes("ud_grh", buf + AUX + 24, gid.raw, 16);
			expect_bytes("ud_grh", buf + AUX + 40, buf + SRC, 200);
			check_ret("ud_grh", ibv_destroy_ah(ah));
		}
		check_ret("ud", ibv_destroy_qp(u1));
		check_ret("ud", ibv_destroy_qp(u2));
	}
	pass("ud_grh");

	/* UC: RDMA WRITE and SEND. */
	{
		struct ibv_qp_init_attr ui = {
			.send_cq = cqa,
			.recv_cq = cqb,
			.cap = { .max_send_wr = 8, .max_recv_wr = 8,
				 .max_send_sge = 1, .max_recv_sge = 1 },
			.qp_type = IBV_QPT_UC,
		};
		struct ibv_qp *c1 = check_ptr("uc", ibv_create_qp(pd, &ui));
		struct ibv_qp *c2 = check_ptr("uc", ibv_create_qp(pd, &ui));

		connect_rc(c1, c2->qp_num, lid, 7);
		connect_rc(c2, c1->qp_num, lid, 7);
		fill(buf + SRC, 300, 40);
		s[0] = sge(SRC, 300);
		wr = write_wr(800, s, DST, IBV_SEND_SIGNALED);
		post_send("uc", c1, &wr);
		poll_one("uc", cqa, &wc);
		expect_wc("uc", &wc, IBV_WC_SUCCESS, 800);
		expect_bytes("uc", buf + DST, buf + SRC, 300);
		r[0] = sge(AUX, 512);
		post_recv("uc", c2, 802, r, 1);
		wr.wr_id = 801;
		wr.opcode = IBV_WR_SEND;
		post_send("uc", c1, &wr);
		poll_one("uc", cqa, &wc);
		expect_wc("uc", &wc, IBV_WC_SUCCESS, 801);
		poll_one("uc", cqb, &wc);
		expect_wc("uc", &wc, IBV_WC_SUCCESS, 802);
		expect("uc", wc.byte_len == 300, "byte_len is not 300");
		expect_bytes("uc", buf + AUX, buf + SRC, 300);
		check_ret("uc", ibv_destroy_qp(c1));
		check_ret("uc", ibv_destroy_qp(c2));
	}
	pass("uc");

	/* Completion channel: arm, send, wait for the event, ack. */
	{
		struct ibv_qp *e1, *e2;
		struct pollfd pfd;

		chan = check_ptr("comp_channel", ibv_create_comp_channel(ctx));
		cqe_ev = check_ptr("comp_channel", ibv_create_cq(ctx, 16, (void *)0x77, chan, 0));
		e1 = make_qp(IBV_QPT_RC, cqa, NULL);
		e2 = make_qp(IBV_QPT_RC, cqe_ev, NULL);
		connect_rc(e1, e2->qp_num, lid, 7);
		connect_rc(e2, e1->qp_num, lid, 7);
		check_ret("comp_channel", ibv_req_notify_cq(cqe_ev, 0));
		r[0] = sge(AUX, 64);
		post_recv("comp_channel", e2, 401, r, 1);
		s[0] = sge(SRC, 8);
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = 400;
		wr.sg_list = s;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_SEND;
		wr.send_flags = IBV_SEND_SIGNALED;
		post_send("comp_channel", e1, &wr);
		poll_one("comp_channel", cqa, &wc);
		expect_wc("comp_channel", &wc, IBV_WC_SUCCESS, 400);
		pfd.fd = chan->fd;
		pfd.events = POLLIN;
		pfd.revents = 0;
		n = poll(&pfd, 1, TIMEOUT_MS);
		expect("comp_channel", n == 1, "no completion event within the timeout");
		check_ret("comp_channel", ibv_get_cq_event(chan, &ev_cq, &ev_ctx));
		expect("comp_channel", ev_cq == cqe_ev && ev_ctx == (void *)0x77,
		       "event for the wrong CQ");
		ibv_ack_cq_events(ev_cq, 1);
		poll_one("comp_channel", cqe_ev, &wc);
		expect_wc("comp_channel", &wc, IBV_WC_SUCCESS, 401);
		/* Not re-armed: no second event. */
		post_recv("comp_channel", e2, 402, r, 1);
		wr.wr_id = 403;
		post_send("comp_channel", e1, &wr);
		poll_one("comp_channel", cqa, &wc);
		poll_one("comp_channel", cqe_ev, &wc);
		expect_wc("comp_channel", &wc, IBV_WC_SUCCESS, 402);
		n = poll(&pfd, 1, 50);
		expect("comp_channel", n == 0, "event without arming");
		pass("comp_channel");

		/* Solicited-only: an unsolicited SEND raises nothing, a
		 * solicited one does. */
		check_ret("comp_solicited", ibv_req_notify_cq(cqe_ev, 1));
		post_recv("comp_solicited", e2, 404, r, 1);
		post_recv("comp_solicited", e2, 405, r, 1);
		wr.wr_id = 406;
		post_send("comp_solicited", e1, &wr);
		poll_one("comp_solicited", cqa, &wc);
		poll_one("comp_solicited", cqe_ev, &wc);
		expect_wc("comp_solicited", &wc, IBV_WC_SUCCESS, 404);
		n = poll(&pfd, 1, 50);
		expect("comp_solicited", n == 0, "event for an unsolicited SEND");
		wr.wr_id = 407;
		wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED;
		post_send("comp_solicited", e1, &wr);
		poll_one("comp_solicited", cqa, &wc);
		n = poll(&pfd, 1, TIMEOUT_MS);
		expect("comp_solicited", n == 1, "no event for a solicited SEND");
		check_ret("comp_solicited", ibv_get_cq_event(chan, &ev_cq, &ev_ctx));
		expect("comp_solicited", ev_cq == cqe_ev, "event for the wrong CQ");
		ibv_ack_cq_events(ev_cq, 1);
		poll_one("comp_solicited", cqe_ev, &wc);
		expect_wc("comp_solicited", &wc, IBV_WC_SUCCESS, 405);
		check_ret("comp_channel", ibv_destroy_qp(e1));
		check_ret("comp_channel", ibv_destroy_qp(e2));
		check_ret("comp_channel", ibv_destroy_cq(cqe_ev));
		check_ret("comp_channel", ibv_destroy_comp_channel(chan));
	}
	pass("comp_solicited");

	/*
	 * The arm sequence number (libmlx5: stepped by ibv_get_cq_event,
	 * carried by every arm, checked by the HCA). Arming twice with no
	 * event in between still gets an event for the next completion, and
	 * after each event read, arming again gets the next one (six rounds:
	 * the 2-bit number wraps). Then an arm made while an event is raised
	 * but not read is stale and ignored; once it is read, arming works.
	 */
	{
		struct ibv_cq *acq;
		struct ibv_qp *z1, *z2;
		struct pollfd pfd;
		const char *st = "comp_arm_twice";
		uint64_t id = 1600;
		int round;

		chan = check_ptr(st, ibv_create_comp_channel(ctx));
		acq = check_ptr(st, ibv_create_cq(ctx, 16, NULL, chan, 0));
		z1 = make_qp(IBV_QPT_RC, acq, NULL);
		z2 = make_qp(IBV_QPT_RC, cqb, NULL);
		connect_rc(z1, z2->qp_num, lid, 7);
		connect_rc(z2, z1->qp_num, lid, 7);
		pfd.fd = chan->fd;
		pfd.events = POLLIN;
		s[0] = sge(SRC, 8);
#define COMPLETE() do { \
		wr = write_wr(id, s, DST, IBV_SEND_SIGNALED); \
		post_send(st, z1, &wr); \
		poll_one(st, acq, &wc); \
		expect_wc(st, &wc, IBV_WC_SUCCESS, id); \
		id++; \
	} while (0)
#define EVENT(what) do { \
		pfd.revents = 0; \
		expect(st, poll(&pfd, 1, TIMEOUT_MS) == 1, "no completion event " what); \
		check_ret(st, ibv_get_cq_event(chan, &ev_cq, &ev_ctx)); \
		expect(st, ev_cq == acq, "event for the wrong CQ"); \
		ibv_ack_cq_events(ev_cq, 1); \
	} while (0)
#define NO_EVENT(what) do { \
		pfd.revents = 0; \
		expect(st, poll(&pfd, 1, 50) == 0, what); \
	} while (0)
		for (round = 0; round < 6; round++) {
			check_ret(st, ibv_req_notify_cq(acq, 0));
			if (round % 2 == 0)
				check_ret(st, ibv_req_notify_cq(acq, 0));
			COMPLETE();
			EVENT("after arming (twice on even rounds)");
			NO_EVENT("two events for one arm");
		}
		pass(st);
		st = "comp_arm_stale";
		check_ret(st, ibv_req_notify_cq(acq, 0));
		COMPLETE();
		/* Raised, not read: this arm repeats the old number. */
		check_ret(st, ibv_req_notify_cq(acq, 0));
		COMPLETE();
		EVENT("for the first arm");
		NO_EVENT("an event for an arm made before the last event was read");
		check_ret(st, ibv_req_notify_cq(acq, 0));
		COMPLETE();
		EVENT("after arming once the event was read");
#undef COMPLETE
#undef EVENT
#undef NO_EVENT
		check_ret(st, ibv_destroy_qp(z1));
		check_ret(st, ibv_destroy_qp(z2));
		check_ret(st, ibv_destroy_cq(acq));
		check_ret(st, ibv_destroy_comp_channel(chan));
	}
	pass("comp_arm_stale");

	/*
	 * Bad rkey: REM_ACCESS_ERR, then the next WR is flushed. The
	 * responder NAKs and moves to ERR too (IBA class C error): its
	 * posted receives flush, and it raises QP_ACCESS_ERR.
	 */
	{
		struct ibv_send_wr w2;
		struct ibv_async_event aev;
		struct ibv_qp *b1 = make_qp(IBV_QPT_RC, cqa, NULL);
		struct ibv_qp *b2 = make_qp(IBV_QPT_RC, cqb, NULL);

		connect_rc(b1, b2->qp_num, lid, 7);
		connect_rc(b2, b1->qp_num, lid, 7);
		r[0] = sge(AUX, 64);
		post_recv("bad_rkey", b2, 504, r, 1);
		post_recv("bad_rkey", b2, 505, r, 1);
		s[0] = sge(SRC, 8);
		wr = write_wr(500, s, DST, IBV_SEND_SIGNALED);
		wr.wr.rdma.rkey = mr->rkey ^ 0x5500;
		w2 = write_wr(501, s, DST, IBV_SEND_SIGNALED);
		wr.next = &w2;
		post_send("bad_rkey", b1, &wr);
		poll_one("bad_rkey", cqa, &wc);
		expect_wc("bad_rkey", &wc, IBV_WC_REM_ACCESS_ERR, 500);
		poll_one("bad_rkey_flush", cqa, &wc);
		expect_wc("bad_rkey_flush", &wc, IBV_WC_WR_FLUSH_ERR, 501);
		pass("bad_rkey");
		pass("bad_rkey_flush");
		expect("bad_rkey_requester_err", qp_state("bad_rkey_requester_err", b1) == IBV_QPS_ERR,
		       "the requester is not in ERR");
		pass("bad_rkey_requester_err");
		expect("bad_rkey_responder_err", qp_state("bad_rkey_responder_err", b2) == IBV_QPS_ERR,
		       "the responder is not in ERR");
		pass("bad_rkey_responder_err");
		poll_one("bad_rkey_responder_flush", cqb, &wc);
		expect_wc("bad_rkey_responder_flush", &wc, IBV_WC_WR_FLUSH_ERR, 504);
		poll_one("bad_rkey_responder_flush", cqb, &wc);
		expect_wc("bad_rkey_responder_flush", &wc, IBV_WC_WR_FLUSH_ERR, 505);
		expect_quiet("bad_rkey_responder_flush", cqb);
		pass("bad_rkey_responder_flush");
		get_async_event("bad_rkey_access_event", &aev);
		expect("bad_rkey_access_event", aev.event_type == IBV_EVENT_QP_ACCESS_ERR,
		       ibv_event_type_str(aev.event_type));
		expect("bad_rkey_access_event", aev.element.qp == b2,
		       "the event names another QP");
		ibv_ack_async_event(&aev);
		expect_no_async_event("bad_rkey_access_event");
		pass("bad_rkey_access_event");

		/* A bad lkey on a fresh connection: LOC_PROT_ERR. */
		{
			struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };

			check_ret("bad_lkey", ibv_modify_qp(b1, &a, IBV_QP_STATE));
			check_ret("bad_lkey", ibv_modify_qp(b2, &a, IBV_QP_STATE));
		}
		connect_rc(b1, b2->qp_num, lid, 7);
		connect_rc(b2, b1->qp_num, lid, 7);
		s[0] = sge(SRC, 8);
		s[0].lkey ^= 0x5500;
		wr = write_wr(503, s, DST, IBV_SEND_SIGNALED);
		post_send("bad_lkey", b1, &wr);
		poll_one("bad_lkey", cqa, &wc);
		expect_wc("bad_lkey", &wc, IBV_WC_LOC_PROT_ERR, 503);
		pass("bad_lkey");
		s[0] = sge(SRC, 8);

		/* Back to RESET and reconnected, the pair works again. */
		{
			struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };

			check_ret("reset_reuse", ibv_modify_qp(b1, &a, IBV_QP_STATE));
			check_ret("reset_reuse", ibv_modify_qp(b2, &a, IBV_QP_STATE));
		}
		connect_rc(b1, b2->qp_num, lid, 7);
		connect_rc(b2, b1->qp_num, lid, 7);
		buf[SRC] = 0x3c;
		wr = write_wr(502, s, DST, IBV_SEND_SIGNALED);
		post_send("reset_reuse", b1, &wr);
		poll_one("reset_reuse", cqa, &wc);
		expect_wc("reset_reuse", &wc, IBV_WC_SUCCESS, 502);
		expect("reset_reuse", buf[DST] == 0x3c, "the write did not land");
		pass("reset_reuse");

		/* A receive too small: REM_INV_REQ / LOC_LEN, then the
		 * responder's other receive is flushed. */
		r[0] = sge(AUX, 4);
		post_recv("recv_too_small", b2, 511, r, 1);
		post_recv("recv_too_small", b2, 512, r, 1);
		s[0] = sge(SRC, 64);
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = 510;
		wr.sg_list = s;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_SEND;
		wr.send_flags = IBV_SEND_SIGNALED;
		post_send("recv_too_small", b1, &wr);
		poll_one("recv_too_small", cqa, &wc);
		expect_wc("recv_too_small", &wc, IBV_WC_REM_INV_REQ_ERR, 510);
		poll_one("recv_too_small", cqb, &wc);
		expect_wc("recv_too_small", &wc, IBV_WC_LOC_LEN_ERR, 511);
		pass("recv_too_small");
		poll_one("recv_flush", cqb, &wc);
		expect_wc("recv_flush", &wc, IBV_WC_WR_FLUSH_ERR, 512);
		pass("recv_flush");
		check_ret("bad_rkey", ibv_destroy_qp(b1));
		check_ret("bad_rkey", ibv_destroy_qp(b2));
	}

	/* RNR with retries: the send waits for the receive. */
	{
		struct ibv_qp *n1 = make_qp(IBV_QPT_RC, cqa, NULL);
		struct ibv_qp *n2 = make_qp(IBV_QPT_RC, cqb, NULL);

		connect_rc(n1, n2->qp_num, lid, 7);
		connect_rc(n2, n1->qp_num, lid, 7);
		fill(buf + SRC, 32, 30);
		s[0] = sge(SRC, 32);
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = 700;
		wr.sg_list = s;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_SEND;
		wr.send_flags = IBV_SEND_SIGNALED;
		post_send("rnr_retry", n1, &wr);
		expect_quiet("rnr_retry", cqa);
		r[0] = sge(AUX, 64);
		post_recv("rnr_retry", n2, 701, r, 1);
		poll_one("rnr_retry", cqa, &wc);
		expect_wc("rnr_retry", &wc, IBV_WC_SUCCESS, 700);
		poll_one("rnr_retry", cqb, &wc);
		expect_wc("rnr_retry", &wc, IBV_WC_SUCCESS, 701);
		expect_bytes("rnr_retry", buf + AUX, buf + SRC, 32);
		check_ret("rnr_retry", ibv_destroy_qp(n1));
		check_ret("rnr_retry", ibv_destroy_qp(n2));
	}
	pass("rnr_retry");

	/* RNR with rnr_retry 0. */
	{
		struct ibv_qp *n1 = make_qp(IBV_QPT_RC, cqa, NULL);
		struct ibv_qp *n2 = make_qp(IBV_QPT_RC, cqb, NULL);

		connect_rc(n1, n2->qp_num, lid, 0);
		connect_rc(n2, n1->qp_num, lid, 0);
		s[0] = sge(SRC, 8);
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = 600;
		wr.sg_list = s;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_SEND;
		wr.send_flags = IBV_SEND_SIGNALED;
		post_send("rnr", n1, &wr);
		poll_one("rnr", cqa, &wc);
		expect_wc("rnr", &wc, IBV_WC_RNR_RETRY_EXC_ERR, 600);
		check_ret("rnr", ibv_destroy_qp(n1));
		check_ret("rnr", ibv_destroy_qp(n2));
	}
	pass("rnr_retry_exceeded");

	/*
	 * ibv_resize_cq grows a CQ holding unpolled completions (past its
	 * first lap): they survive with their wr_ids, and later ones land in
	 * the new ring after them.
	 */
	{
		struct ibv_cq *rcq = check_ptr("cq_resize", ibv_create_cq(ctx, 4, NULL, NULL, 0));
		struct ibv_qp *z1 = make_qp(IBV_QPT_RC, rcq, NULL);
		struct ibv_qp *z2 = make_qp(IBV_QPT_RC, cqb, NULL);
		long end;
		int k;

		expect("cq_resize", rcq->cqe == 7, "a 4-entry CQ does not have 8 entries");
		connect_rc(z1, z2->qp_num, lid, 7);
		connect_rc(z2, z1->qp_num, lid, 7);
		s[0] = sge(SRC, 64);
		for (k = 0; k < 6; k++) {
			wr = write_wr(800 + k, s, DST, IBV_SEND_SIGNALED);
			post_send("cq_resize", z1, &wr);
			poll_one("cq_resize", rcq, &wc);
			expect_wc("cq_resize", &wc, IBV_WC_SUCCESS, 800 + k);
		}
		/* Three completions left unpolled, the last in the second lap. */
		for (k = 0; k < 3; k++) {
			fill(buf + SRC + 4096 * k, 64, 40 + k);
			s[0] = sge(SRC + 4096 * k, 64);
			wr = write_wr(900 + k, s, DST + 4096 * k, IBV_SEND_SIGNALED);
			post_send("cq_resize", z1, &wr);
		}
		/* The CQE is written under the lock RESIZE_CQ takes, with the data. */
		end = now_ms() + TIMEOUT_MS;
		while (memcmp(buf + DST + 8192, buf + SRC + 8192, 64))
			if (now_ms() > end)
				fail("cq_resize", "the writes did not arrive");
		check_ret("cq_resize", ibv_resize_cq(rcq, 40));
		expect("cq_resize", rcq->cqe == 63, "resized CQ does not have 64 entries");
		for (k = 0; k < 3; k++) {
			poll_one("cq_resize", rcq, &wc);
			expect_wc("cq_resize", &wc, IBV_WC_SUCCESS, 900 + k);
			expect("cq_resize", wc.opcode == IBV_WC_RDMA_WRITE, "opcode is not RDMA_WRITE");
		}
		expect_quiet("cq_resize", rcq);
		for (k = 0; k < 12; k++) {
			s[0] = sge(SRC, 64);
			wr = write_wr(1000 + k, s, DST, IBV_SEND_SIGNALED);
			post_send("cq_resize", z1, &wr);
		}
		for (k = 0; k < 12; k++) {
			poll_one("cq_resize", rcq, &wc);
			expect_wc("cq_resize", &wc, IBV_WC_SUCCESS, 1000 + k);
		}
		expect_quiet("cq_resize", rcq);
		check_ret("cq_resize", ibv_destroy_qp(z1));
		check_ret("cq_resize", ibv_destroy_qp(z2));
		check_ret("cq_resize", ibv_destroy_cq(rcq));
	}
	pass("cq_resize");

	/*
	 * 40 completions unpolled. A resize to 8 cannot hold them: the HCA
	 * refuses it (EINVAL) and all 40 stay, in order; the CQ works on.
	 * Then a resize to 100 keeps 40 unpolled ones, in order, and later
	 * completions land after them.
	 */
	{
		struct ibv_cq *rcq = check_ptr("cq_resize_below_unpolled",
					       ibv_create_cq(ctx, 63, NULL, NULL, 0));
		struct ibv_qp *z1 = make_qp(IBV_QPT_RC, rcq, NULL);
		struct ibv_qp *z2 = make_qp(IBV_QPT_RC, cqb, NULL);
		const char *st = "cq_resize_below_unpolled";
		uint64_t base[4] = { 1200, 1300, 1400, 1500 };
		int n[4] = { 40, 24, 40, 24 };
		int round, k;
		long end;

		expect(st, rcq->cqe == 63, "a 63-entry CQ does not have 64 entries");
		connect_rc(z1, z2->qp_num, lid, 7);
		connect_rc(z2, z1->qp_num, lid, 7);
		for (round = 0; round < 4; round++) {
			if (round == 2) {
				pass(st);
				st = "cq_resize_grow_unpolled";
			}
			for (k = 0; k < n[round]; k++) {
				fill(buf + SRC + 64 * k, 64, (unsigned)(base[round] + k));
				s[0] = sge(SRC + 64 * k, 64);
				wr = write_wr(base[round] + k, s, DST + 64 * k, IBV_SEND_SIGNALED);
				post_send(st, z1, &wr);
			}
			/* Each CQE is written with its data: wait for the last. */
			end = now_ms() + TIMEOUT_MS;
			while (memcmp(buf + DST + 64 * (n[round] - 1),
				      buf + SRC + 64 * (n[round] - 1), 64))
				if (now_ms() > end)
					fail(st, "the writes did not arrive");
			if (round == 0) {
				expect(st, ibv_resize_cq(rcq, 8) == EINVAL,
				       "resize(8) with 40 unpolled did not fail with EINVAL");
				expect(st, rcq->cqe == 63, "a refused resize changed the depth");
			} else if (round == 2) {
				check_ret(st, ibv_resize_cq(rcq, 100));
				expect(st, rcq->cqe == 127, "resized CQ does not have 128 entries");
			}
			for (k = 0; k < n[round]; k++) {
				poll_one(st, rcq, &wc);
				expect_wc(st, &wc, IBV_WC_SUCCESS, base[round] + k);
			}
			expect_quiet(st, rcq);
		}
		check_ret(st, ibv_destroy_qp(z1));
		check_ret(st, ibv_destroy_qp(z2));
		check_ret(st, ibv_destroy_cq(rcq));
	}
	pass("cq_resize_grow_unpolled");

	/*
	 * CQ overrun: a 2-entry CQ gets a third completion while nothing is
	 * polled. The CQ goes to error with a CQ_ERR async event naming it;
	 * the two CQEs already in the ring stay, the third is lost, and the
	 * CQ takes no completion after (it stays in error).
	 */
	{
		struct ibv_cq *ocq = check_ptr("cq_overrun", ibv_create_cq(ctx, 1, NULL, NULL, 0));
		struct ibv_qp *z1 = make_qp(IBV_QPT_RC, ocq, NULL);
		struct ibv_qp *z2 = make_qp(IBV_QPT_RC, cqb, NULL);
		struct ibv_send_wr w[3];
		struct ibv_async_event aev;
		int k;

		expect("cq_overrun", ocq->cqe == 1, "a 1-entry CQ does not have 2 entries");
		connect_rc(z1, z2->qp_num, lid, 7);
		connect_rc(z2, z1->qp_num, lid, 7);
		s[0] = sge(SRC, 8);
		expect_no_async_event("cq_overrun");
		for (k = 0; k < 3; k++) {
			w[k] = write_wr(1100 + k, s, DST, IBV_SEND_SIGNALED);
			w[k].next = k < 2 ? &w[k + 1] : NULL;
		}
		post_send("cq_overrun", z1, &w[0]);
		get_async_event("cq_overrun", &aev);
		expect("cq_overrun", aev.event_type == IBV_EVENT_CQ_ERR,
		       ibv_event_type_str(aev.event_type));
		expect("cq_overrun", aev.element.cq == ocq, "the event names another CQ");
		ibv_ack_async_event(&aev);
		for (k = 0; k < 2; k++) {
			poll_one("cq_overrun", ocq, &wc);
			expect_wc("cq_overrun", &wc, IBV_WC_SUCCESS, 1100 + k);
		}
		expect_quiet("cq_overrun", ocq);
		pass("cq_overrun");
		/* Room again, but the CQ stays in error: nothing more lands. */
		w[0] = write_wr(1103, s, DST, IBV_SEND_SIGNALED);
		post_send("cq_overrun_stops", z1, &w[0]);
		expect_quiet("cq_overrun_stops", ocq);
		expect_no_async_event("cq_overrun_stops");
		check_ret("cq_overrun_stops", ibv_destroy_qp(z1));
		check_ret("cq_overrun_stops", ibv_destroy_qp(z2));
		check_ret("cq_overrun_stops", ibv_destroy_cq(ocq));
	}
	pass("cq_overrun_stops");

	/*
	 * A chain that mixes plain requests with an inline one and ends with
	 * one the QP cannot take (5 SGEs, 4 allowed): the call fails naming
	 * that request in *bad_wr, and the three before it were posted, in
	 * order (both libraries report it: libmlx5 with ENOMEM, ours with
	 * EINVAL).
	 */
	{
		struct ibv_send_wr w[4], *bad = NULL;
		struct ibv_sge ws[2], five[5];
		uint8_t inl[24];
		int ret, k;

		fill(buf + SRC, 256, 9);
		fill(inl, sizeof(inl), 10);
		memset(buf + DST, 0, 0x3000);
		memset(buf + AUX, 0, 64);
		r[0] = sge(AUX, 64);
		post_recv("mixed_chain", qb, 1201, r, 1);
		ws[0] = sge(SRC, 128);
		ws[1] = sge(SRC + 128, 128);
		w[0] = write_wr(1200, &ws[0], DST + 0x1000, IBV_SEND_SIGNALED);
		memset(&w[1], 0, sizeof(w[1]));
		s[0].addr = (uintptr_t)inl;
		s[0].length = sizeof(inl);
		s[0].lkey = 0;
		w[1].wr_id = 1202;
		w[1].sg_list = s;
		w[1].num_sge = 1;
		w[1].opcode = IBV_WR_SEND;
		w[1].send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
		w[2] = write_wr(1203, &ws[1], DST + 0x2000, IBV_SEND_SIGNALED);
		for (k = 0; k < 5; k++)
			five[k] = sge(SRC, 8);
		w[3] = write_wr(1204, five, DST, IBV_SEND_SIGNALED);
		w[3].num_sge = 5;
		for (k = 0; k < 3; k++)
			w[k].next = &w[k + 1];
		w[3].next = NULL;
		ret = ibv_post_send(qa, &w[0], &bad);
		expect("mixed_chain", ret == EINVAL || ret == ENOMEM,
		       "a 5-SGE request on a 4-SGE QP was not refused");
		expect("mixed_chain", bad == &w[3], "bad_wr is not the refused request");
		for (k = 0; k < 3; k++) {
			poll_one("mixed_chain", cqa, &wc);
			expect_wc("mixed_chain", &wc, IBV_WC_SUCCESS, 1200 + (k ? k + 1 : 0));
		}
		expect_quiet("mixed_chain", cqa);
		poll_one("mixed_chain", cqb, &wc);
		expect_wc("mixed_chain", &wc, IBV_WC_SUCCESS, 1201);
		expect("mixed_chain", wc.byte_len == sizeof(inl), "byte_len is not 24");
		expect_bytes("mixed_chain", buf + AUX, inl, sizeof(inl));
		expect_bytes("mixed_chain", buf + DST + 0x1000, buf + SRC, 128);
		expect_bytes("mixed_chain", buf + DST + 0x2000, buf + SRC + 128, 128);
	}
	pass("mixed_chain");

	/* Teardown. */
	check_ret("teardown", ibv_destroy_qp(qa));
	check_ret("teardown", ibv_destroy_qp(qb));
	check_ret("teardown", ibv_destroy_cq(cqa));
	check_ret("teardown", ibv_destroy_cq(cqb));
	check_ret("teardown", ibv_dereg_mr(mr));
	check_ret("teardown", ibv_dealloc_pd(pd));
	check_ret("teardown", ibv_close_device(ctx));
	ibv_free_device_list(list);
	free(buf);
	pass("teardown");
	return 0;
}
