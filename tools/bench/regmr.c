/*
 * The memory-registration cost probe, on rdma-core (libibverbs): the twin
 * of verbs/examples/regmr.rs, which `cargo xtask bench` runs next to it.
 *
 * regmr SIZE ITERS [DEVICE [pinned|odp]]
 *
 * Maps SIZE bytes (anonymous, private, not touched), registers them once
 * unmeasured (the first registration of a process, and the first touch of
 * its pages, are not what is compared) while reading VmPin before, during
 * and after, then runs ITERS measured register + deregister pairs of the
 * same buffer, each timed with CLOCK_MONOTONIC. Under callgrind
 * (--collect-atstart=no --toggle-collect='*measured_*') only the measured
 * function is counted: the library's own instructions, the kernel's work
 * excluded. Prints one line:
 *
 *   regmr: size=S mode=M iters=N median_ns=T min_ns=T vmpin_before_kib=K
 *          vmpin_held_kib=K vmpin_after_kib=K
 *
 * or "regmr: ... unsupported errno=E" when the registration is refused
 * (on-demand paging where the kernel has none), exit status 0 either way.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <infiniband/verbs.h>

__attribute__((noinline)) int measured_reg_dereg(struct ibv_pd *pd, void *buf,
						 size_t len, int access)
{
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, len, access);

	if (!mr)
		return -1;
	return ibv_dereg_mr(mr);
}

static long vmpin_kib(void)
{
	char line[256];
	long kib = -1;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmPin: %ld", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

static long long now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int cmp_ll(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	const char *dev = "rxe0", *mode = "pinned";
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	long long *t;
	size_t size;
	long iters, i, before, held, after;
	int n, k, access;
	void *buf;

	if (argc < 3) {
		fprintf(stderr, "usage: regmr SIZE ITERS [DEVICE [pinned|odp]]\n");
		return 2;
	}
	size = strtoull(argv[1], NULL, 10);
	iters = strtol(argv[2], NULL, 10);
	if (argc > 3)
		dev = argv[3];
	if (argc > 4)
		mode = argv[4];
	if (!size || iters < 1 || (strcmp(mode, "pinned") && strcmp(mode, "odp"))) {
		fprintf(stderr, "regmr.c: bad SIZE, ITERS or mode\n");
		return 2;
	}
	access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
		 IBV_ACCESS_REMOTE_READ;
	if (!strcmp(mode, "odp"))
		access |= IBV_ACCESS_ON_DEMAND;
	list = ibv_get_device_list(&n);
	for (k = 0; list && k < n; k++)
		if (!strcmp(ibv_get_device_name(list[k]), dev))
			ctx = ibv_open_device(list[k]);
	if (!ctx) {
		fprintf(stderr, "regmr.c: cannot open %s\n", dev);
		return 1;
	}
	pd = ibv_alloc_pd(ctx);
	buf = mmap(NULL, size, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	t = calloc(iters, sizeof(*t));
	if (!pd || buf == MAP_FAILED || !t) {
		fprintf(stderr, "regmr.c: set-up failed\n");
		return 1;
	}
	before = vmpin_kib();
	mr = ibv_reg_mr(pd, buf, size, access);
	if (!mr) {
		printf("regmr: size=%zu mode=%s unsupported errno=%d\n", size,
		       mode, errno);
		return 0;
	}
	held = vmpin_kib();
	if (ibv_dereg_mr(mr)) {
		fprintf(stderr, "regmr.c: dereg failed\n");
		return 1;
	}
	after = vmpin_kib();
	for (i = 0; i < iters; i++) {
		long long t0 = now_ns();

		if (measured_reg_dereg(pd, buf, size, access)) {
			fprintf(stderr, "regmr.c: iteration %ld failed: %s\n",
				i, strerror(errno));
			return 1;
		}
		t[i] = now_ns() - t0;
	}
	qsort(t, iters, sizeof(*t), cmp_ll);
	printf("regmr: size=%zu mode=%s iters=%ld median_ns=%lld min_ns=%lld "
	       "vmpin_before_kib=%ld vmpin_held_kib=%ld vmpin_after_kib=%ld\n",
	       size, mode, iters, t[iters / 2], t[0], before, held, after);
	return 0;
}
