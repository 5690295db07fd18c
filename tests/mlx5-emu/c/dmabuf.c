/*
 * rdma-core (libibverbs + libmlx5) against the emulated mlx5 device: the
 * ioctl methods the emulator answers. GID queries (QUERY_GID_ENTRY /
 * QUERY_GID_TABLE), dmabuf memory registration (REG_DMABUF_MR) with the
 * kernel's refusals, RDMA WRITE / READ / SEND through the dmabuf MR, and
 * ADVISE_MR on a device without on-demand paging.
 *
 * The dmabuf is the emulator's stand-in for one (tests/mlx5-emu/src/
 * dmabuf.rs): a memfd sealed against shrinking, as the kernel's udmabuf
 * wants it. The device writes it through the emulator's mapping; this
 * program reads and writes it through its own mapping of the same file,
 * as an application reads GPU memory through the GPU's API.
 *
 * tests/src/bin/mlx5_dmabuf.rs runs the same steps through our provider,
 * and `cargo xtask mlx5` compares the REG_DMABUF_MR ioctls of both
 * (MLX5_EMU_CMD_LOG). Keep the registrations of the two programs in step.
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "scenario.h"

#define TIMEOUT_MS 2000
/* The stand-in dmabuf: two pages. */
#define DMABUF_SIZE 8192
/* The registration: 0x800 bytes from 0x1100, seen by the device at IOVA. */
#define OFFSET 0x1100
#define LENGTH 0x800
#define IOVA 0x7000100ull
#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

static void poll_ok(const char *step, struct ibv_cq *cq, uint64_t wr_id)
{
	long end = now_ms() + TIMEOUT_MS;
	struct ibv_wc wc;
	char why[128];
	int n;

	for (;;) {
		n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			fail(step, "ibv_poll_cq failed");
		if (n == 1)
			break;
		if (now_ms() > end)
			fail(step, "timed out waiting for a completion");
	}
	if (wc.status != IBV_WC_SUCCESS || wc.wr_id != wr_id) {
		snprintf(why, sizeof(why), "completion %llu status %s, expected %llu success",
			 (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status),
			 (unsigned long long)wr_id);
		fail(step, why);
	}
}

static void expect_bytes(const char *step, const uint8_t *got, const uint8_t *want, size_t n)
{
	char why[96];
	size_t i;

	for (i = 0; i < n; i++)
		if (got[i] != want[i]) {
			snprintf(why, sizeof(why), "byte %zu is 0x%02x, expected 0x%02x", i,
				 got[i], want[i]);
			fail(step, why);
		}
}

/* ibv_reg_dmabuf_mr must fail with `want`. */
static void expect_refused(const char *step, struct ibv_pd *pd, uint64_t offset, size_t length,
			   uint64_t iova, int fd, int access, int want)
{
	struct ibv_mr *mr;
	char why[96];

	errno = 0;
	mr = ibv_reg_dmabuf_mr(pd, offset, length, iova, fd, access);
	if (mr)
		fail(step, "registered");
	if (errno != want) {
		snprintf(why, sizeof(why), "errno %s, expected %s", strerror(errno),
			 strerror(want));
		fail(step, why);
	}
	pass(step);
}

static void post_send(const char *step, struct ibv_qp *qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;

	check_ret(step, ibv_post_send(qp, wr, &bad));
}

int main(void)
{
	struct ibv_device **list;
	struct ibv_device *dev = NULL;
	struct ibv_context *ctx;
	struct ibv_port_attr pattr;
	struct ibv_pd *pd;
	struct ibv_mr *dmr, *mr;
	struct ibv_cq *cqa, *cqb;
	struct ibv_qp *qa, *qb;
	struct ibv_qp_init_attr init;
	struct ibv_send_wr wr;
	struct ibv_recv_wr rwr, *rbad;
	struct ibv_sge s;
	struct ibv_gid_entry ge, table[4];
	union ibv_gid gid;
	uint8_t *map, *buf, want[256];
	int fd, pipefd[2], closed, n, i;
	ssize_t got;

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
	fd = memfd_create("dmabuf-stand-in", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, DMABUF_SIZE) || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK))
		fail("setup", "cannot make the stand-in dmabuf");
	map = mmap(NULL, DMABUF_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		fail("setup", "cannot map the stand-in dmabuf");
	pass("setup");

	/* The registration, then what the kernel refuses (same order in ours). */
	dmr = check_ptr("reg_dmabuf_mr", ibv_reg_dmabuf_mr(pd, OFFSET, LENGTH, IOVA, fd, ACCESS));
	expect("reg_dmabuf_mr", dmr->lkey != 0 && dmr->rkey != 0, "zero key");
	expect("reg_dmabuf_mr", dmr->addr == (void *)(uintptr_t)OFFSET && dmr->length == LENGTH,
	       "addr/length are not the offset and length");
	pass("reg_dmabuf_mr");

	closed = dup(fd);
	if (closed < 0 || close(closed))
		fail("refuse_closed_fd", "dup/close");
	expect_refused("refuse_closed_fd", pd, OFFSET, LENGTH, IOVA, closed, ACCESS, EBADF);
	if (pipe(pipefd))
		fail("refuse_not_dmabuf", "pipe");
	expect_refused("refuse_not_dmabuf", pd, 0, 4096, 0, pipefd[0], ACCESS, EINVAL);
	expect_refused("refuse_past_end", pd, 4096, DMABUF_SIZE, 0, fd, ACCESS, EINVAL);
	expect_refused("refuse_iova_page_offset", pd, OFFSET, LENGTH, IOVA + 8, fd, ACCESS, EINVAL);
	expect_refused("refuse_on_demand", pd, OFFSET, LENGTH, IOVA, fd,
		       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND, EINVAL);
	expect_refused("refuse_zero_length", pd, OFFSET, 0, IOVA, fd, ACCESS, EINVAL);
	expect_refused("refuse_remote_write_without_local", pd, OFFSET, LENGTH, IOVA, fd,
		       IBV_ACCESS_REMOTE_WRITE, EINVAL);

	/* Data through the dmabuf MR between two connected RC QPs. */
	if (posix_memalign((void **)&buf, 4096, 4096))
		fail("rdma_write_to_dmabuf", "posix_memalign");
	memset(buf, 0, 4096);
	mr = check_ptr("rdma_write_to_dmabuf",
		       ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE));
	check_ret("rdma_write_to_dmabuf", ibv_query_port(ctx, 1, &pattr));
	cqa = check_ptr("rdma_write_to_dmabuf", ibv_create_cq(ctx, 16, NULL, NULL, 0));
	cqb = check_ptr("rdma_write_to_dmabuf", ibv_create_cq(ctx, 16, NULL, NULL, 0));
	memset(&init, 0, sizeof(init));
	init.qp_type = IBV_QPT_RC;
	init.cap.max_send_wr = 8;
	init.cap.max_recv_wr = 8;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	init.send_cq = init.recv_cq = cqa;
	qa = check_ptr("rdma_write_to_dmabuf", ibv_create_qp(pd, &init));
	init.send_cq = init.recv_cq = cqb;
	qb = check_ptr("rdma_write_to_dmabuf", ibv_create_qp(pd, &init));
	connect_rc(qa, qb->qp_num, pattr.lid, 7);
	connect_rc(qb, qa->qp_num, pattr.lid, 7);

	for (i = 0; i < 256; i++)
		buf[i] = want[i] = (uint8_t)(i * 7 + 1);
	s = (struct ibv_sge){ .addr = (uintptr_t)buf, .length = 256, .lkey = mr->lkey };
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 1;
	wr.sg_list = &s;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = IOVA + 0x10;
	wr.wr.rdma.rkey = dmr->rkey;
	post_send("rdma_write_to_dmabuf", qa, &wr);
	poll_ok("rdma_write_to_dmabuf", cqa, 1);
	expect_bytes("rdma_write_to_dmabuf", map + OFFSET + 0x10, want, 256);
	expect("rdma_write_to_dmabuf", map[OFFSET + 0x0f] == 0 && map[OFFSET + 0x110] == 0,
	       "bytes around the target changed");
	got = pread(fd, want, 1, OFFSET + 0x10);
	expect("rdma_write_to_dmabuf", got == 1 && want[0] == 1, "the file does not hold it");
	pass("rdma_write_to_dmabuf");

	for (i = 0; i < 256; i++)
		map[OFFSET + 0x400 + i] = want[i] = (uint8_t)(i ^ 0x5a);
	s = (struct ibv_sge){ .addr = (uintptr_t)(buf + 0x800), .length = 256, .lkey = mr->lkey };
	wr.wr_id = 2;
	wr.opcode = IBV_WR_RDMA_READ;
	wr.wr.rdma.remote_addr = IOVA + 0x400;
	post_send("rdma_read_from_dmabuf", qa, &wr);
	poll_ok("rdma_read_from_dmabuf", cqa, 2);
	expect_bytes("rdma_read_from_dmabuf", buf + 0x800, want, 256);
	pass("rdma_read_from_dmabuf");

	/* The dmabuf MR as the local side: a SEND gathered from it. */
	s = (struct ibv_sge){ .addr = (uintptr_t)(buf + 0xc00), .length = 256, .lkey = mr->lkey };
	memset(&rwr, 0, sizeof(rwr));
	rwr.wr_id = 3;
	rwr.sg_list = &s;
	rwr.num_sge = 1;
	check_ret("send_from_dmabuf", ibv_post_recv(qb, &rwr, &rbad));
	s = (struct ibv_sge){ .addr = IOVA + 0x400, .length = 256, .lkey = dmr->lkey };
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 4;
	wr.sg_list = &s;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	post_send("send_from_dmabuf", qa, &wr);
	poll_ok("send_from_dmabuf", cqa, 4);
	poll_ok("send_from_dmabuf", cqb, 3);
	expect_bytes("send_from_dmabuf", buf + 0xc00, want, 256);
	pass("send_from_dmabuf");

	/* No on-demand paging on this device: mlx5 has no advice to give. */
	s = (struct ibv_sge){ .addr = (uintptr_t)buf, .length = 4096, .lkey = mr->lkey };
	n = ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &s, 1);
	expect("advise_mr_without_odp", n == EOPNOTSUPP, "not EOPNOTSUPP");
	pass("advise_mr_without_odp");

	/* The GID methods: the one valid entry, and an empty slot. */
	check_ret("query_gid_entry", ibv_query_gid_ex(ctx, 1, 0, &ge, 0));
	check_ret("query_gid_entry", ibv_query_gid(ctx, 1, 0, &gid));
	expect("query_gid_entry", !memcmp(&ge.gid, &gid, sizeof(gid)) && ge.gid_index == 0 &&
		       ge.port_num == 1 && ge.gid_type == IBV_GID_TYPE_IB && ge.ndev_ifindex == 0,
	       "entry 0 is not the IB link-local GID");
	expect("query_gid_entry", be64toh(gid.global.subnet_prefix) == 0xfe80000000000000ull,
	       "not link-local");
	pass("query_gid_entry");
	expect("query_gid_empty", ibv_query_gid_ex(ctx, 1, 1, &ge, 0) == ENODATA,
	       "slot 1 is not ENODATA");
	expect("query_gid_empty", ibv_query_gid_ex(ctx, 2, 0, &ge, 0) == EINVAL,
	       "port 2 is not EINVAL");
	pass("query_gid_empty");
	got = ibv_query_gid_table(ctx, table, 4, 0);
	expect("query_gid_table", got == 1, "not exactly one valid entry");
	expect("query_gid_table", !memcmp(&table[0].gid, &gid, sizeof(gid)) &&
		       table[0].gid_index == 0 && table[0].port_num == 1,
	       "the entry is not GID 0 of port 1");
	pass("query_gid_table");

	check_ret("dereg_dmabuf_mr", ibv_destroy_qp(qa));
	check_ret("dereg_dmabuf_mr", ibv_destroy_qp(qb));
	check_ret("dereg_dmabuf_mr", ibv_dereg_mr(dmr));
	check_ret("dereg_dmabuf_mr", ibv_dereg_mr(mr));
	pass("dereg_dmabuf_mr");

	check_ret("close", ibv_destroy_cq(cqa));
	check_ret("close", ibv_destroy_cq(cqb));
	check_ret("close", ibv_dealloc_pd(pd));
	check_ret("close", ibv_close_device(ctx));
	ibv_free_device_list(list);
	munmap(map, DMABUF_SIZE);
	close(fd);
	close(pipefd[0]);
	close(pipefd[1]);
	free(buf);
	pass("close");
	return 0;
}
