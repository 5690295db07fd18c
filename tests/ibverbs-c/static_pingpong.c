/*
 * A ping-pong over an RC QP written against <infiniband/verbs.h>, for
 * linking statically with our libibverbs.a (cargo xtask ibverbs builds it
 * as target/ibverbs/<profile>/static_pingpong): a C program on our stack
 * with no shared library at all. It speaks the TCP exchange of rdma-core's
 * ibv_rc_pingpong ("LID:QPN:PSN:GID" as text, then "done"), so the two
 * interoperate, and it checks every message it receives: the size it asked
 * for, and every byte 0x7b (what ibv_rc_pingpong sends without -c).
 *
 * usage: static_pingpong -d DEV -g GIDX -p PORT -s SIZE -n ITERS [SERVER_IPV4]
 * Prints "<bytes> bytes in <secs> seconds" on success, exits 1 on any error.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define RX_DEPTH 64
#define SEND_ID 1
#define RECV_ID 2
#define FILL 0x7b

struct dest {
	unsigned lid, qpn, psn;
	union ibv_gid gid;
};

static void die(const char *what)
{
	fprintf(stderr, "static_pingpong: %s (errno %d: %s)\n", what, errno, strerror(errno));
	exit(1);
}

static int full_io(int fd, void *buf, size_t n, int writing)
{
	size_t done = 0;
	while (done < n) {
		ssize_t r = writing ? write(fd, (char *)buf + done, n - done)
				    : read(fd, (char *)buf + done, n - done);
		if (r <= 0)
			return -1;
		done += (size_t)r;
	}
	return 0;
}

/* The 52-byte message ibv_rc_pingpong exchanges. */
static void to_msg(const struct dest *d, char msg[52])
{
	memset(msg, 0, 52);
	snprintf(msg, 52, "%04x:%06x:%06x:", d->lid, d->qpn, d->psn);
	for (int i = 0; i < 16; i++)
		snprintf(msg + 19 + 2 * i, 3, "%02x", d->gid.raw[i]);
}

static int from_msg(const char msg[52], struct dest *d)
{
	char hex[33];
	if (sscanf(msg, "%x:%x:%x:%32s", &d->lid, &d->qpn, &d->psn, hex) != 4 || strlen(hex) != 32)
		return -1;
	for (int i = 0; i < 16; i++) {
		unsigned b;
		if (sscanf(hex + 2 * i, "%2x", &b) != 1)
			return -1;
		d->gid.raw[i] = (uint8_t)b;
	}
	return 0;
}

static int post_recv(struct ibv_qp *qp, struct ibv_mr *mr, char *buf, uint32_t size)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = size, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = RECV_ID, .sg_list = &sge, .num_sge = 1 }, *bad;
	return ibv_post_recv(qp, &wr, &bad);
}

static int post_send(struct ibv_qp *qp, struct ibv_mr *mr, char *buf, uint32_t size)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = size, .lkey = mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = SEND_ID, .sg_list = &sge, .num_sge = 1,
		.opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED,
	}, *bad;
	return ibv_post_send(qp, &wr, &bad);
}

static void connect_qp(struct ibv_qp *qp, int gidx, const struct dest *my, const struct dest *rem)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = rem->qpn,
		.rq_psn = rem->psn, .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
		.ah_attr = { .dlid = (uint16_t)rem->lid, .port_num = 1 },
	};
	if (rem->gid.global.interface_id) {
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = rem->gid;
		a.ah_attr.grh.sgid_index = (uint8_t)gidx;
		a.ah_attr.grh.hop_limit = 1;
	}
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("modify QP to RTR");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = my->psn;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("modify QP to RTS");
}

/* Exchanges addresses as ibv_rc_pingpong does; the server connects its QP
 * before it answers. */
static void exchange(const char *server, int port, struct ibv_qp *qp, int gidx,
		     const struct dest *my, struct dest *rem)
{
	char msg[52];
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	if (fd < 0)
		die("socket");
	if (server) {
		if (inet_pton(AF_INET, server, &sa.sin_addr) != 1)
			die("the server must be an IPv4 address");
		if (connect(fd, (struct sockaddr *)&sa, sizeof sa))
			die("connect");
		to_msg(my, msg);
		if (full_io(fd, msg, sizeof msg, 1) || full_io(fd, msg, sizeof msg, 0) ||
		    from_msg(msg, rem) || full_io(fd, "done", sizeof "done", 1))
			die("address exchange");
		connect_qp(qp, gidx, my, rem);
	} else {
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		sa.sin_addr.s_addr = htonl(INADDR_ANY);
		if (bind(fd, (struct sockaddr *)&sa, sizeof sa) || listen(fd, 1))
			die("listen");
		int c = accept(fd, NULL, NULL);
		if (c < 0)
			die("accept");
		if (full_io(c, msg, sizeof msg, 0) || from_msg(msg, rem))
			die("address exchange");
		connect_qp(qp, gidx, my, rem);
		to_msg(my, msg);
		char done[sizeof "done"];
		if (full_io(c, msg, sizeof msg, 1) || full_io(c, done, sizeof done, 0))
			die("address exchange");
		close(c);
	}
	close(fd);
}

/* Completions seen so far. */
static uint32_t sends_done, recvs_done;

/* Polls until `sends` sends and `recvs` receives have completed, checking
 * each status and each message received (then reposting receives). */
static void wait_until(struct ibv_cq *cq, uint32_t sends, uint32_t recvs, char *rbuf, uint32_t size,
		       int *recvs_left, struct ibv_qp *qp, struct ibv_mr *mr)
{
	while (sends_done < sends || recvs_done < recvs) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			die("poll CQ");
		if (n == 0)
			continue;
		if (wc.status != IBV_WC_SUCCESS) {
			fprintf(stderr, "static_pingpong: completion %s (wr_id %llu)\n",
				ibv_wc_status_str(wc.status), (unsigned long long)wc.wr_id);
			exit(1);
		}
		if (wc.wr_id == SEND_ID) {
			sends_done++;
			continue;
		}
		if (wc.byte_len != size) {
			fprintf(stderr, "static_pingpong: received %u bytes, want %u\n", wc.byte_len, size);
			exit(1);
		}
		for (uint32_t i = 0; i < size; i++)
			if ((unsigned char)rbuf[i] != FILL) {
				fprintf(stderr, "static_pingpong: byte %u is %#x, want %#x\n", i,
					(unsigned char)rbuf[i], FILL);
				exit(1);
			}
		/* The next message lands here only after this side answers. */
		memset(rbuf, 0, size);
		recvs_done++;
		if (--*recvs_left < RX_DEPTH / 2) {
			while (*recvs_left < RX_DEPTH) {
				if (post_recv(qp, mr, rbuf, size))
					die("post receive");
				++*recvs_left;
			}
		}
	}
}

int main(int argc, char **argv)
{
	const char *devname = NULL, *server = NULL;
	int gidx = -1, port = 18515, opt;
	uint32_t size = 4096, iters = 1000;
	while ((opt = getopt(argc, argv, "d:g:p:s:n:")) != -1) {
		switch (opt) {
		case 'd': devname = optarg; break;
		case 'g': gidx = atoi(optarg); break;
		case 'p': port = atoi(optarg); break;
		case 's': size = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'n': iters = (uint32_t)strtoul(optarg, NULL, 0); break;
		default:
			fprintf(stderr, "usage: %s -d DEV -g GIDX -p PORT -s SIZE -n ITERS [SERVER_IPV4]\n", argv[0]);
			return 1;
		}
	}
	if (optind < argc)
		server = argv[optind];
	if (!devname || size == 0 || iters == 0) {
		fprintf(stderr, "static_pingpong: -d DEV is required; -s and -n must be above 0\n");
		return 1;
	}

	int num;
	struct ibv_device **list = ibv_get_device_list(&num), *dev = NULL;
	if (!list)
		die("ibv_get_device_list");
	for (int i = 0; i < num; i++)
		if (!strcmp(ibv_get_device_name(list[i]), devname))
			dev = list[i];
	if (!dev) {
		fprintf(stderr, "static_pingpong: no device %s\n", devname);
		return 1;
	}
	struct ibv_context *ctx = ibv_open_device(dev);
	if (!ctx)
		die("ibv_open_device");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char *sbuf = aligned_alloc(4096, ((size_t)size + 4095) / 4096 * 4096 * 2);
	if (!pd || !sbuf)
		die("PD or buffer");
	char *rbuf = sbuf + ((size_t)size + 4095) / 4096 * 4096;
	memset(sbuf, FILL, size);
	memset(rbuf, 0, size);
	struct ibv_mr *mr = ibv_reg_mr(pd, sbuf, ((size_t)size + 4095) / 4096 * 4096 * 2,
				       IBV_ACCESS_LOCAL_WRITE);
	struct ibv_cq *cq = ibv_create_cq(ctx, RX_DEPTH + 1, NULL, NULL, 0);
	if (!mr || !cq)
		die("MR or CQ");
	struct ibv_qp_init_attr qia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = RX_DEPTH, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &qia);
	if (!qp)
		die("ibv_create_qp");
	struct ibv_qp_attr init = {
		.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qp_access_flags = 0,
	};
	if (ibv_modify_qp(qp, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("modify QP to INIT");
	int recvs_left = 0;
	while (recvs_left < RX_DEPTH) {
		if (post_recv(qp, mr, rbuf, size))
			die("post receive");
		recvs_left++;
	}
	struct ibv_port_attr pa;
	struct dest my = { 0 }, rem = { 0 };
	if (ibv_query_port(ctx, 1, &pa))
		die("ibv_query_port");
	my.lid = pa.lid;
	if (gidx >= 0 && ibv_query_gid(ctx, 1, gidx, &my.gid))
		die("ibv_query_gid");
	my.qpn = qp->qp_num;
	srand48(getpid() * time(NULL));
	my.psn = (unsigned)lrand48() & 0xffffff;
	exchange(server, port, qp, gidx, &my, &rem);

	struct timeval start, end;
	gettimeofday(&start, NULL);
	for (uint32_t i = 1; i <= iters; i++) {
		if (server) {
			/* The connecting side sends first, as ibv_rc_pingpong's does. */
			if (post_send(qp, mr, sbuf, size))
				die("post send");
			wait_until(cq, i, i, rbuf, size, &recvs_left, qp, mr);
		} else {
			wait_until(cq, i - 1, i, rbuf, size, &recvs_left, qp, mr);
			if (post_send(qp, mr, sbuf, size))
				die("post send");
			wait_until(cq, i, i, rbuf, size, &recvs_left, qp, mr);
		}
	}
	gettimeofday(&end, NULL);
	double secs = (end.tv_sec - start.tv_sec) + (end.tv_usec - start.tv_usec) / 1e6;
	printf("%llu bytes in %.2f seconds\n", (unsigned long long)size * iters * 2, secs);

	if (ibv_destroy_qp(qp) || ibv_destroy_cq(cq) || ibv_dereg_mr(mr) || ibv_dealloc_pd(pd) ||
	    ibv_close_device(ctx))
		die("teardown");
	ibv_free_device_list(list);
	free(sbuf);
	return 0;
}
