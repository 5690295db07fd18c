/*
 * Test-only scenario for the mlx5 emulator (tests/mlx5-emu): RoCE. The
 * emulated ConnectX-5 runs with an Ethernet port (MLX5_EMU_LINK=eth, set
 * by `cargo xtask mlx5` for every program named roce*), and unmodified
 * rdma-core (libibverbs + libmlx5) drives it:
 *
 *   - the port as mlx5 reports a RoCE port, and the GID table the kernel
 *     builds for a netdev with 192.0.2.1 and 2001:db8::1 (RoCE v1 and v2
 *     entry per address, the link-local default GID first);
 *   - RC over a global route from the IPv4 and from the IPv6 RoCE v2 GID;
 *   - the kernel's refusals of a RoCE path: no GRH, an empty source GID
 *     entry, no neighbour, source and destination of different families;
 *   - UD with the RoCE address vector (the destination MAC from
 *     CREATE_AH): the receive starts with the IPv4 header at offset 20
 *     (RoCE v2, IPv4 GID), an IPv6 header (RoCE v2, IPv6 GID) or an IB GRH
 *     (RoCE v1), IBV_WC_GRH is set and the payload follows intact; the
 *     sender is answered through ibv_create_ah_from_wc; a datagram to a
 *     multicast MAC nobody joined is dropped without taking a receive.
 *
 * Prints "PASS <step>" per step; on the first failure prints
 * "FAIL <step>: <reason>" and exits 1. Every wait is bounded.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <net/if.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "scenario.h"

#define BUF_SIZE (1 << 20)
#define TIMEOUT_MS 2000
#define UD_QKEY 0x11111111u
#define SRC 0x00000
#define DST 0x40000
#define AUX 0x80000

/* The GID indices of the table the emulated kernel builds. */
#define GID_V1_LL 0
#define GID_V2_LL 1
#define GID_V1_IPV4 2
#define GID_V2_IPV4 3
#define GID_V1_IPV6 4
#define GID_V2_IPV6 5

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_mr *mr;
static uint8_t *buf;

static void poll_one(const char *step, struct ibv_cq *cq, struct ibv_wc *wc)
{
	long end = now_ms() + TIMEOUT_MS;
	int n;

	for (;;) {
		n = ibv_poll_cq(cq, 1, wc);
		if (n < 0)
			fail(step, "ibv_poll_cq failed");
		if (n == 1)
			break;
		if (now_ms() > end)
			fail(step, "timed out waiting for a completion");
	}
	if (wc->status != IBV_WC_SUCCESS) {
		char why[96];

		snprintf(why, sizeof(why), "completion status %s",
			 ibv_wc_status_str(wc->status));
		fail(step, why);
	}
}

static void expect_quiet(const char *step, struct ibv_cq *cq)
{
	long end = now_ms() + 50;
	struct ibv_wc wc;

	while (now_ms() < end)
		if (ibv_poll_cq(cq, 1, &wc) != 0)
			fail(step, "unexpected completion");
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = (uint8_t)(seed * 31 + i * 7 + (i >> 8));
}

static void expect_bytes(const char *step, const uint8_t *got,
			 const uint8_t *want, size_t n, const char *what)
{
	char why[128];
	size_t i;

	for (i = 0; i < n; i++)
		if (got[i] != want[i]) {
			snprintf(why, sizeof(why), "%s: byte %zu is 0x%02x, expected 0x%02x",
				 what, i, got[i], want[i]);
			fail(step, why);
		}
}

static union ibv_gid gid_at(const char *step, int index)
{
	union ibv_gid g;

	check_ret(step, ibv_query_gid(ctx, 1, index, &g) ? errno : 0);
	return g;
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

static struct ibv_qp *make_qp(enum ibv_qp_type type, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr init = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = type,
	};

	return check_ptr("create_qp", ibv_create_qp(pd, &init));
}

static void to_init(const char *step, struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = 1,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
	};

	check_ret(step, ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
					  IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
}

/* INIT -> RTR towards QP `dest` over a global route; returns the errno. */
static int to_rtr(struct ibv_qp *qp, uint32_t dest, int global, int sgid_index,
		  const union ibv_gid *dgid)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.ah_attr.port_num = 1;
	a.ah_attr.is_global = global;
	a.ah_attr.grh.dgid = *dgid;
	a.ah_attr.grh.sgid_index = sgid_index;
	a.ah_attr.grh.hop_limit = 64;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				     IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static void to_rts(const char *step, struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTS,
		.timeout = 14,
		.retry_cnt = 7,
		.rnr_retry = 7,
		.max_rd_atomic = 1,
	};

	check_ret(step, ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN |
					  IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					  IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC));
}

/* Two RC QPs over GID `sgid_index` (to itself), then a WRITE and a SEND. */
static void rc_over(const char *step, int sgid_index, unsigned seed)
{
	struct ibv_cq *cq = check_ptr(step, ibv_create_cq(ctx, 16, NULL, NULL, 0));
	struct ibv_qp *a = make_qp(IBV_QPT_RC, cq), *b = make_qp(IBV_QPT_RC, cq);
	union ibv_gid g = gid_at(step, sgid_index);
	struct ibv_sge s, r;
	struct ibv_send_wr wr, *bad;
	struct ibv_recv_wr rw = { .wr_id = 2, .sg_list = &r, .num_sge = 1 }, *rbad;
	struct ibv_wc wc, sc;

	to_init(step, a);
	to_init(step, b);
	check_ret(step, to_rtr(a, b->qp_num, 1, sgid_index, &g));
	check_ret(step, to_rtr(b, a->qp_num, 1, sgid_index, &g));
	to_rts(step, a);
	to_rts(step, b);

	fill(buf + SRC, 4096, seed);
	memset(buf + DST, 0, 8192);
	s = sge(SRC, 4096);
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 1;
	wr.sg_list = &s;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = (uintptr_t)(buf + DST);
	wr.wr.rdma.rkey = mr->rkey;
	check_ret(step, ibv_post_send(a, &wr, &bad));
	poll_one(step, cq, &wc);
	expect(step, wc.wr_id == 1 && wc.opcode == IBV_WC_RDMA_WRITE, "not the WRITE");
	expect_bytes(step, buf + DST, buf + SRC, 4096, "RDMA WRITE data");

	r = sge(DST + 4096, 4096);
	check_ret(step, ibv_post_recv(b, &rw, &rbad));
	wr.wr_id = 3;
	wr.opcode = IBV_WR_SEND;
	s = sge(SRC, 1000);
	check_ret(step, ibv_post_send(a, &wr, &bad));
	/* The send's and the receive's completions, in either order. */
	poll_one(step, cq, &wc);
	if (wc.wr_id == 3)
		poll_one(step, cq, &wc);
	else
		poll_one(step, cq, &sc);
	expect(step, wc.wr_id == 2 && wc.opcode == IBV_WC_RECV, "not the receive");
	expect(step, wc.byte_len == 1000, "byte_len is not 1000");
	expect(step, wc.src_qp == a->qp_num, "src_qp is not the sender");
	expect(step, !(wc.wc_flags & IBV_WC_GRH), "GRH flag on an RC receive");
	expect_bytes(step, buf + DST + 4096, buf + SRC, 1000, "SEND data");
	expect_quiet(step, cq);
	check_ret(step, ibv_destroy_qp(a));
	check_ret(step, ibv_destroy_qp(b));
	check_ret(step, ibv_destroy_cq(cq));
	pass(step);
}

static void ready_ud(const char *step, struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = 1,
		.qkey = UD_QKEY,
	};

	check_ret(step, ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
					  IBV_QP_PORT | IBV_QP_QKEY));
	a.qp_state = IBV_QPS_RTR;
	check_ret(step, ibv_modify_qp(qp, &a, IBV_QP_STATE));
	a.qp_state = IBV_QPS_RTS;
	check_ret(step, ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN));
}

static struct ibv_ah *roce_ah(const char *step, int sgid_index,
			      const union ibv_gid *dgid)
{
	struct ibv_ah_attr aa;

	memset(&aa, 0, sizeof(aa));
	aa.port_num = 1;
	aa.is_global = 1;
	aa.grh.dgid = *dgid;
	aa.grh.sgid_index = sgid_index;
	aa.grh.hop_limit = 64;
	aa.grh.traffic_class = 0x10;
	return check_ptr(step, ibv_create_ah(pd, &aa));
}

/* Sends `len` bytes from `from` to `to` through `ah`; returns the receive. */
static void ud_send(const char *step, struct ibv_qp *from, struct ibv_qp *to,
		    struct ibv_ah *ah, struct ibv_cq *scq, struct ibv_cq *rcq,
		    uint32_t len, struct ibv_wc *rwc)
{
	struct ibv_sge s = sge(SRC, len), r = sge(AUX, 40 + 1024);
	struct ibv_recv_wr rw = { .wr_id = 20, .sg_list = &r, .num_sge = 1 }, *rbad;
	struct ibv_send_wr wr, *bad;
	struct ibv_wc wc;

	check_ret(step, ibv_post_recv(to, &rw, &rbad));
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 10;
	wr.sg_list = &s;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = to->qp_num;
	wr.wr.ud.remote_qkey = UD_QKEY;
	check_ret(step, ibv_post_send(from, &wr, &bad));
	poll_one(step, scq, &wc);
	expect(step, wc.wr_id == 10, "not the send");
	poll_one(step, rcq, rwc);
	expect(step, rwc->wr_id == 20 && rwc->opcode == IBV_WC_RECV, "not the receive");
	expect(step, rwc->byte_len == 40 + len, "byte_len is not 40 + the payload");
	expect(step, rwc->src_qp == from->qp_num, "src_qp is not the sender");
	expect(step, rwc->wc_flags & IBV_WC_GRH, "IBV_WC_GRH not set");
	expect_bytes(step, buf + AUX + 40, buf + SRC, len, "payload");
}

static uint16_t ipv4_sum(const uint8_t *h)
{
	uint32_t sum = 0;
	int i;

	for (i = 0; i < 20; i += 2)
		sum += (uint32_t)h[i] << 8 | h[i + 1];
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)sum;
}

int main(void)
{
	struct ibv_device **list;
	struct ibv_device *dev = NULL;
	struct ibv_port_attr pattr;
	union ibv_gid g[6];
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
	pd = check_ptr("setup", ibv_alloc_pd(ctx));
	if (posix_memalign((void **)&buf, 4096, BUF_SIZE))
		fail("setup", "posix_memalign");
	memset(buf, 0, BUF_SIZE);
	mr = check_ptr("setup", ibv_reg_mr(pd, buf, BUF_SIZE,
					   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
	pass("setup");

	/* The port as mlx5_query_port_roce reports it. */
	check_ret("port", ibv_query_port(ctx, 1, &pattr));
	expect("port", pattr.link_layer == IBV_LINK_LAYER_ETHERNET, "link layer is not Ethernet");
	expect("port", pattr.state == IBV_PORT_ACTIVE, "port not active");
	expect("port", pattr.lid == 0 && pattr.sm_lid == 0, "a RoCE port has no LID");
	expect("port", pattr.max_mtu == IBV_MTU_4096, "max_mtu is not 4096");
	expect("port", pattr.active_mtu == IBV_MTU_1024, "active_mtu is not 1024");
	expect("port", pattr.gid_tbl_len == 256, "gid_tbl_len is not 256");
	expect("port", pattr.pkey_tbl_len == 1, "pkey_tbl_len is not 1");
	expect("port", pattr.port_cap_flags & (1u << 26), "IP-based GIDs not advertised");
	pass("port");

	/* The GID table: types, addresses, netdev. */
	{
		static const char *const want[6] = {
			"fe80::e42:a1ff:fefb:1234", "fe80::e42:a1ff:fefb:1234",
			"::ffff:192.0.2.1", "::ffff:192.0.2.1",
			"2001:db8::1", "2001:db8::1",
		};
		struct ibv_gid_entry entries[16];
		struct ibv_gid_entry e;
		char text[INET6_ADDRSTRLEN], why[128];
		ssize_t got;

		for (i = 0; i < 6; i++) {
			g[i] = gid_at("gid_table", i);
			inet_ntop(AF_INET6, g[i].raw, text, sizeof(text));
			check_ret("gid_table", ibv_query_gid_ex(ctx, 1, i, &e, 0));
			if (strcmp(text, want[i]) ||
			    e.gid_type != (i % 2 ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1) ||
			    e.ndev_ifindex != if_nametoindex("lo")) {
				snprintf(why, sizeof(why), "GID %d is %s type %u netdev %u", i,
					 text, e.gid_type, e.ndev_ifindex);
				fail("gid_table", why);
			}
		}
		expect("gid_table", !gid_at("gid_table", 6).global.interface_id,
		       "GID 6 is not empty");
		expect("gid_table", ibv_query_gid_ex(ctx, 1, 6, &e, 0) != 0,
		       "the empty GID 6 has an entry");
		got = ibv_query_gid_table(ctx, entries, 16, 0);
		expect("gid_table", got == 6, "ibv_query_gid_table does not list 6 GIDs");
	}
	pass("gid_table");

	rc_over("rc_ipv4", GID_V2_IPV4, 1);
	rc_over("rc_ipv6", GID_V2_IPV6, 2);

	/* The kernel's refusals of a RoCE path; the QP stays in INIT. */
	{
		struct ibv_cq *cq = check_ptr("rc_refusals", ibv_create_cq(ctx, 4, NULL, NULL, 0));
		struct ibv_qp *q = make_qp(IBV_QPT_RC, cq);
		union ibv_gid stranger = g[GID_V2_IPV6];
		struct ibv_qp_attr a;
		struct ibv_qp_init_attr init;

		stranger.raw[15] = 0x99;
		to_init("rc_refusals", q);
		expect("rc_refusals", to_rtr(q, q->qp_num, 0, GID_V2_IPV4, &g[GID_V2_IPV4]) == EINVAL,
		       "RTR without a GRH is not EINVAL");
		expect("rc_refusals", to_rtr(q, q->qp_num, 1, 6, &g[GID_V2_IPV4]) == ENODATA,
		       "RTR from an empty GID entry is not ENODATA");
		expect("rc_refusals", to_rtr(q, q->qp_num, 1, GID_V2_IPV6, &stranger) == ETIMEDOUT,
		       "RTR to a GID nobody has is not ETIMEDOUT");
		expect("rc_refusals", to_rtr(q, q->qp_num, 1, GID_V2_IPV4, &g[GID_V2_IPV6]) == EINVAL,
		       "RTR from IPv4 to IPv6 is not EINVAL");
		check_ret("rc_refusals", ibv_query_qp(q, &a, IBV_QP_STATE, &init));
		expect("rc_refusals", a.qp_state == IBV_QPS_INIT, "the QP left INIT");
		check_ret("rc_refusals", to_rtr(q, q->qp_num, 1, GID_V2_IPV4, &g[GID_V2_IPV4]));
		check_ret("rc_refusals", ibv_destroy_qp(q));
		check_ret("rc_refusals", ibv_destroy_cq(cq));
	}
	pass("rc_refusals");

	/* UD: address handles and the network header of each GID type. */
	{
		struct ibv_cq *c1 = check_ptr("ud", ibv_create_cq(ctx, 16, NULL, NULL, 0));
		struct ibv_cq *c2 = check_ptr("ud", ibv_create_cq(ctx, 16, NULL, NULL, 0));
		struct ibv_qp *u1 = make_qp(IBV_QPT_UD, c1), *u2 = make_qp(IBV_QPT_UD, c2);
		uint8_t *h = buf + AUX;
		struct ibv_ah_attr reply;
		struct ibv_ah *ah;
		struct ibv_wc wc;

		ready_ud("ud", u1);
		ready_ud("ud", u2);

		/*
		 * RoCE v2 over IPv4. The 20 bytes before the IPv4 header are
		 * undefined; filled with an IPv6-looking pattern, libibverbs must
		 * tell the header by its checksum.
		 */
		ah = roce_ah("ud_ipv4", GID_V2_IPV4, &g[GID_V2_IPV4]);
		fill(buf + SRC, 200, 3);
		memset(h, 0x65, 40);
		ud_send("ud_ipv4", u1, u2, ah, c1, c2, 200, &wc);
		expect("ud_ipv4", h[20] == 0x45, "no IPv4 header (version 4, 5 words) at 20");
		expect("ud_ipv4", h[21] == 0x10, "TOS is not the traffic class");
		expect("ud_ipv4", (h[22] << 8 | h[23]) == 20 + 8 + 12 + 8 + 200 + 4,
		       "IPv4 total length is not IP + UDP + BTH + DETH + 200 + ICRC");
		expect("ud_ipv4", h[28] == 64 && h[29] == 17, "TTL or protocol wrong");
		expect("ud_ipv4", ipv4_sum(h + 20) == 0xffff, "IPv4 header checksum wrong");
		expect_bytes("ud_ipv4", h + 32, g[GID_V2_IPV4].raw + 12, 4, "source address");
		expect_bytes("ud_ipv4", h + 36, g[GID_V2_IPV4].raw + 12, 4, "destination address");
		check_ret("ud_ipv4", ibv_init_ah_from_wc(ctx, 1, &wc, (struct ibv_grh *)h, &reply));
		expect("ud_ipv4", reply.is_global && reply.grh.sgid_index == GID_V2_IPV4,
		       "the reply does not go from the IPv4 RoCE v2 GID");
		expect_bytes("ud_ipv4", reply.grh.dgid.raw, g[GID_V2_IPV4].raw, 16, "reply dgid");
		check_ret("ud_ipv4", ibv_destroy_ah(ah));
		/* The answer, through an AH made from the completion. */
		ah = check_ptr("ud_ipv4", ibv_create_ah_from_wc(pd, &wc, (struct ibv_grh *)h, 1));
		fill(buf + SRC, 64, 4);
		ud_send("ud_ipv4", u2, u1, ah, c2, c1, 64, &wc);
		expect("ud_ipv4", h[20] == 0x45, "the reply has no IPv4 header");
		check_ret("ud_ipv4", ibv_destroy_ah(ah));
		pass("ud_ipv4");

		/* RoCE v2 over IPv6: an IPv6 header, UDP next. */
		ah = roce_ah("ud_ipv6", GID_V2_IPV6, &g[GID_V2_IPV6]);
		fill(buf + SRC, 300, 5);
		memset(h, 0, 40);
		ud_send("ud_ipv6", u1, u2, ah, c1, c2, 300, &wc);
		expect("ud_ipv6", h[0] >> 4 == 6 && (((h[0] & 0xf) << 4) | h[1] >> 4) == 0x10,
		       "not IPv6 with the traffic class");
		expect("ud_ipv6", (h[4] << 8 | h[5]) == 8 + 12 + 8 + 300 + 4,
		       "payload length is not UDP + BTH + DETH + 300 + ICRC");
		expect("ud_ipv6", h[6] == 17 && h[7] == 64, "next header or hop limit wrong");
		expect_bytes("ud_ipv6", h + 8, g[GID_V2_IPV6].raw, 16, "source GID");
		expect_bytes("ud_ipv6", h + 24, g[GID_V2_IPV6].raw, 16, "destination GID");
		check_ret("ud_ipv6", ibv_init_ah_from_wc(ctx, 1, &wc, (struct ibv_grh *)h, &reply));
		expect("ud_ipv6", reply.grh.sgid_index == GID_V2_IPV6,
		       "the reply does not go from the IPv6 RoCE v2 GID");
		check_ret("ud_ipv6", ibv_destroy_ah(ah));
		pass("ud_ipv6");

		/* RoCE v1 from the link-local GID: an IB GRH. */
		ah = roce_ah("ud_roce_v1", GID_V1_LL, &g[GID_V1_LL]);
		fill(buf + SRC, 100, 6);
		memset(h, 0, 40);
		ud_send("ud_roce_v1", u1, u2, ah, c1, c2, 100, &wc);
		expect("ud_roce_v1", h[0] >> 4 == 6 && h[6] == 0x1b,
		       "not a GRH with next header 0x1B");
		expect("ud_roce_v1", (h[4] << 8 | h[5]) == 12 + 8 + 100 + 4,
		       "payload length is not BTH + DETH + 100 + ICRC");
		expect_bytes("ud_roce_v1", h + 8, g[GID_V1_LL].raw, 16, "source GID");
		check_ret("ud_roce_v1", ibv_destroy_ah(ah));
		pass("ud_roce_v1");

		/*
		 * To a multicast GID: the MAC is the group's, nobody joined it,
		 * so the datagram is sent but not received, and the receive
		 * stays posted for the next datagram.
		 */
		{
			union ibv_gid mc;
			struct ibv_sge s = sge(SRC, 10), r = sge(AUX, 40 + 1024);
			struct ibv_recv_wr rw = { .wr_id = 30, .sg_list = &r, .num_sge = 1 }, *rbad;
			struct ibv_send_wr wr, *bad;

			memset(&mc, 0, sizeof(mc));
			mc.raw[0] = 0xff;
			mc.raw[1] = 0x0e;
			mc.raw[15] = 1;
			ah = roce_ah("ud_dropped", GID_V2_IPV6, &mc);
			check_ret("ud_dropped", ibv_post_recv(u2, &rw, &rbad));
			memset(&wr, 0, sizeof(wr));
			wr.wr_id = 31;
			wr.sg_list = &s;
			wr.num_sge = 1;
			wr.opcode = IBV_WR_SEND;
			wr.send_flags = IBV_SEND_SIGNALED;
			wr.wr.ud.ah = ah;
			wr.wr.ud.remote_qpn = u2->qp_num;
			wr.wr.ud.remote_qkey = UD_QKEY;
			check_ret("ud_dropped", ibv_post_send(u1, &wr, &bad));
			poll_one("ud_dropped", c1, &wc);
			expect("ud_dropped", wc.wr_id == 31, "not the send");
			expect_quiet("ud_dropped", c2);
			check_ret("ud_dropped", ibv_destroy_ah(ah));
			ah = roce_ah("ud_dropped", GID_V2_IPV6, &g[GID_V2_IPV6]);
			wr.wr_id = 32;
			wr.wr.ud.ah = ah;
			check_ret("ud_dropped", ibv_post_send(u1, &wr, &bad));
			poll_one("ud_dropped", c1, &wc);
			poll_one("ud_dropped", c2, &wc);
			expect("ud_dropped", wc.wr_id == 30 && wc.byte_len == 50,
			       "the posted receive did not take the next datagram");
			check_ret("ud_dropped", ibv_destroy_ah(ah));
		}
		pass("ud_dropped");

		check_ret("ud", ibv_destroy_qp(u1));
		check_ret("ud", ibv_destroy_qp(u2));
		check_ret("ud", ibv_destroy_cq(c1));
		check_ret("ud", ibv_destroy_cq(c2));
	}

	/* CREATE_AH's refusals (the kernel's; libmlx5 refuses no GRH itself). */
	{
		struct ibv_ah_attr aa;
		union ibv_gid stranger = g[GID_V2_IPV4];

		stranger.raw[15] = 9;
		memset(&aa, 0, sizeof(aa));
		aa.port_num = 1;
		errno = 0;
		expect("ah_refusals", !ibv_create_ah(pd, &aa) && errno == EINVAL,
		       "an AH without a GRH is not refused with EINVAL");
		aa.is_global = 1;
		aa.grh.sgid_index = GID_V2_IPV4;
		aa.grh.dgid = stranger;
		errno = 0;
		expect("ah_refusals", !ibv_create_ah(pd, &aa) && errno == ETIMEDOUT,
		       "an AH to a GID nobody has is not refused with ETIMEDOUT");
		aa.grh.dgid = g[GID_V2_IPV6];
		errno = 0;
		expect("ah_refusals", !ibv_create_ah(pd, &aa) && errno == EINVAL,
		       "an AH from IPv4 to IPv6 is not refused with EINVAL");
		aa.grh.sgid_index = 7;
		errno = 0;
		expect("ah_refusals", !ibv_create_ah(pd, &aa) && errno == ENODATA,
		       "an AH from an empty GID entry is not refused with ENODATA");
	}
	pass("ah_refusals");

	check_ret("teardown", ibv_dereg_mr(mr));
	check_ret("teardown", ibv_dealloc_pd(pd));
	check_ret("teardown", ibv_close_device(ctx));
	ibv_free_device_list(list);
	free(buf);
	pass("teardown");
	return 0;
}
