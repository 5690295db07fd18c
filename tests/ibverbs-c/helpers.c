/*
 * libibverbs' helpers that need no device, on whichever libibverbs.so.1
 * the loader finds: the static-rate conversions (ibv_rate_to_mult,
 * mult_to_ibv_rate, ibv_rate_to_mbps, mbps_to_ibv_rate), the path record
 * copies librdmacm calls (ibv_copy_path_rec_to_kern and back with
 * ibv_copy_path_rec_from_kern), the compatibility version
 * ibv_register_driver@IBVERBS_1.1, and two functions of the private
 * interface rdma-core's providers call (__ioctl_final_num_attrs,
 * ibv_read_ibdev_sysfs_file).
 *
 * Every answer goes to stdout, one line each, so that `cargo xtask
 * ibverbs` runs this program on rdma-core's library and on ours and
 * requires the same output. ibv_wr_opcode_str (rdma-core 56's
 * IBVERBS_PRIVATE_34, which rdma-core 44 lacks) is looked up with dlvsym
 * and checked here against the names rdma-core 56 gives, the verdict on
 * stderr; `--expect-wr-opcode-str` makes its absence a failure. Exits 0
 * when every check passed. Written for this project.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <infiniband/sa.h>
#include <infiniband/verbs.h>
#include <rdma/ib_user_sa.h>
#include <rdma/rdma_user_ioctl_cmds.h>

/* Not in the installed headers: libibverbs exports them for librdmacm
 * and its providers. */
void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src);
void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src);
int ibv_read_ibdev_sysfs_file(char *buf, size_t size, void *sysfs_dev, const char *fnfmt, ...);

/* The head of a provider's ioctl command buffer (rdma-core's private
 * struct ibv_command_buffer): three pointers, five bytes of indices and
 * flags, then the kernel's struct ib_uverbs_ioctl_hdr and its
 * attributes. */
struct cmd_block {
	struct cmd_block *next;
	struct ib_uverbs_attr *next_attr;
	struct ib_uverbs_attr *last_attr;
	uint8_t bytes[5];
	struct ib_uverbs_ioctl_hdr hdr;
	struct ib_uverbs_attr attrs[6];
};
unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, struct cmd_block *link);

/* The compatibility version, bound explicitly (a program linked today
 * cannot bind it otherwise). */
void register_driver_1_1(const char *name, void *init);
__asm__(".symver register_driver_1_1, ibv_register_driver@IBVERBS_1.1");

static int failed;

static void check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "FAIL %s\n", what);
		failed = 1;
	}
}

static void rates(void)
{
	int v, m;

	for (v = -2; v <= 40; v++)
		printf("rate %d: mult %d mbps %d\n", v, ibv_rate_to_mult(v), ibv_rate_to_mbps(v));
	for (m = -1; m <= 500; m++) {
		enum ibv_rate r = mult_to_ibv_rate(m);

		if (r != IBV_RATE_MAX)
			printf("mult %d: rate %d\n", m, r);
	}
	printf("mult 0x7fffffff: rate %d\n", mult_to_ibv_rate(0x7fffffff));
	for (v = 0; v <= 40; v++) {
		int mbps = ibv_rate_to_mbps(v);

		printf("mbps %d: rate %d; %d: %d; %d: %d\n", mbps, mbps_to_ibv_rate(mbps), mbps + 1,
		       mbps_to_ibv_rate(mbps + 1), mbps - 1, mbps_to_ibv_rate(mbps - 1));
	}
}

static void print_bytes(const char *what, const void *p, size_t n)
{
	const unsigned char *b = p;
	size_t i;

	printf("%s:", what);
	for (i = 0; i < n; i++)
		printf(" %02x", b[i]);
	printf("\n");
}

static void path_records(void)
{
	struct ibv_sa_path_rec src, back;
	struct ib_user_path_rec k;
	int i, round;

	for (round = 0; round < 2; round++) {
		memset(&src, 0, sizeof(src));
		for (i = 0; i < 16; i++) {
			src.dgid.raw[i] = (uint8_t)(0x10 + i + round);
			src.sgid.raw[i] = (uint8_t)(0xf0 - i);
		}
		src.dlid = htobe16(0x1234);
		src.slid = htobe16(0xbeef);
		src.raw_traffic = round ? -1 : 1;
		src.flow_label = htobe32(0x000abcde);
		src.hop_limit = 64;
		src.traffic_class = 0xa5;
		src.reversible = round ? -7 : 1;
		src.numb_path = 3;
		src.pkey = htobe16(0xffff);
		src.sl = 5;
		src.mtu_selector = 2;
		src.mtu = IBV_MTU_4096;
		src.rate_selector = 1;
		src.rate = IBV_RATE_100_GBPS;
		src.packet_life_time_selector = 2;
		src.packet_life_time = 18;
		src.preference = 0x77;
		memset(&k, 0xcc, sizeof(k));
		ibv_copy_path_rec_to_kern(&k, &src);
		print_bytes("to_kern", &k, sizeof(k));
		memset(&back, 0, sizeof(back));
		ibv_copy_path_rec_from_kern(&back, &k);
		printf("back: dlid %04x slid %04x raw %d flow %08x hop %u tc %u rev %d numb %u pkey %04x sl %u"
		       " mtu %u/%u rate %u/%u plt %u/%u pref %u gids %s\n",
		       be16toh(back.dlid), be16toh(back.slid), back.raw_traffic, be32toh(back.flow_label),
		       back.hop_limit, back.traffic_class, back.reversible, back.numb_path,
		       be16toh(back.pkey), back.sl, back.mtu_selector, back.mtu, back.rate_selector,
		       back.rate, back.packet_life_time_selector, back.packet_life_time, back.preference,
		       memcmp(back.dgid.raw, src.dgid.raw, 16) || memcmp(back.sgid.raw, src.sgid.raw, 16)
			       ? "differ"
			       : "same");
	}
}

static void private_interface(void)
{
	static struct cmd_block a, b;
	char buf[16] = "unchanged";
	int r;

	printf("final_num_attrs(4, NULL): %u\n", __ioctl_final_num_attrs(4, NULL));
	a.next = &b;
	a.next_attr = &a.attrs[2];
	b.next_attr = &b.attrs[5];
	printf("final_num_attrs(1, 2+5): %u\n", __ioctl_final_num_attrs(1, &a));
	b.next_attr = &b.attrs[0];
	printf("final_num_attrs(0, 2+0): %u\n", __ioctl_final_num_attrs(0, &a));
	errno = 0;
	r = ibv_read_ibdev_sysfs_file(buf, sizeof(buf), NULL, "ports/%d/state", 1);
	printf("read_ibdev_sysfs_file(NULL): %d errno %d (%s) buf %s\n", r, errno, strerror(errno), buf);
	register_driver_1_1("rverbs-test", NULL);
	printf("register_driver@IBVERBS_1.1: returned\n");
}

static void wr_opcode_str(int expected)
{
	static const struct {
		int op;
		const char *name;
	} names[] = {
		{IBV_WR_RDMA_WRITE, "rdma-write"},
		{IBV_WR_RDMA_WRITE_WITH_IMM, "rdma-write-with-imm"},
		{IBV_WR_SEND, "send"},
		{IBV_WR_SEND_WITH_IMM, "send-with-imm"},
		{IBV_WR_RDMA_READ, "rdma-read"},
		{IBV_WR_ATOMIC_CMP_AND_SWP, "atomic-cmp-and-swp"},
		{IBV_WR_ATOMIC_FETCH_AND_ADD, "atomic-fetch-and-add"},
		{IBV_WR_LOCAL_INV, "local-inv"},
		{IBV_WR_BIND_MW, "bind-mw"},
		{IBV_WR_SEND_WITH_INV, "send-with-inv"},
		{IBV_WR_TSO, "tso"},
		{IBV_WR_DRIVER1, "driver1"},
		{14, "flush"},
		{15, "atomic-write"},
		{-1, "unknown"},
		{16, "unknown"},
		{1000, "unknown"},
	};
	const char *(*f)(int) = (const char *(*)(int))dlvsym(RTLD_DEFAULT, "ibv_wr_opcode_str",
							     "IBVERBS_PRIVATE_34");
	size_t i;

	if (!f) {
		fprintf(stderr, "wr_opcode_str: not in this library\n");
		check(!expected, "ibv_wr_opcode_str@IBVERBS_PRIVATE_34 is missing");
		return;
	}
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		const char *s = f(names[i].op);

		if (!s || strcmp(s, names[i].name)) {
			fprintf(stderr, "FAIL wr_opcode_str(%d): %s, not %s\n", names[i].op,
				s ? s : "NULL", names[i].name);
			failed = 1;
		}
	}
	/* Inside the enum's range but no opcode: no name. */
	check(!f(12) && !f(13), "wr_opcode_str(12), (13) are not NULL");
	fprintf(stderr, "wr_opcode_str: %zu names checked, 12 and 13 NULL\n",
		sizeof(names) / sizeof(names[0]));
}

int main(int argc, char **argv)
{
	int expect = argc > 1 && !strcmp(argv[1], "--expect-wr-opcode-str");

	/* Which library the loader found (ours defines its marker). */
	fprintf(stderr, "library: %s\n", dlsym(RTLD_DEFAULT, "rverbs_ibverbs_version") ? "ours" : "rdma-core");

	rates();
	path_records();
	private_interface();
	wr_opcode_str(expect);
	fprintf(stderr, "helpers: %s\n", failed ? "FAILED" : "ok");
	return failed;
}
