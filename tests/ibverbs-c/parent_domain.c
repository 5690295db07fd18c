/*
 * parent_domain.c: the rules of thread domains and parent domains
 * (ibv_alloc_td(3), ibv_alloc_parent_domain(3)) on whichever
 * libibverbs.so.1 the loader picks. Test-only: `cargo xtask ibverbs`
 * builds it as target/ibverbs/<profile>/c-tests/parent_domain;
 * tests/vm/ibverbs_parent_domain.sh runs it on rxe on rdma-core's library
 * (librxe has no parent domains: the program says "skipped") and on ours,
 * and it runs by hand on the emulated mlx5 on both libraries (libmlx5 is
 * the reference there).
 *
 * Each check prints "ok NAME" or "FAIL NAME: why"; "info" lines are facts
 * that may differ between libraries. Exits 0 if every check passed.
 *
 * The checks:
 *   td_comp_mask        ibv_alloc_td with an unknown comp_mask: EINVAL.
 *   pd_null             ibv_alloc_parent_domain without a PD: EINVAL.
 *   pd_comp_mask        with an unknown comp_mask bit: EINVAL.
 *   cq_plain_pd         ibv_create_cq_ex with IBV_CQ_INIT_ATTR_MASK_PD on
 *                       a plain PD: EINVAL (libmlx5's rule).
 *   busy_order          while a parent domain uses them, its thread
 *                       domain and its protection domain cannot be
 *                       deallocated (EBUSY). (Without a thread domain
 *                       where ibv_alloc_td fails otherwise than with
 *                       EOPNOTSUPP: libmlx5 on the emulated ConnectX-5,
 *                       which cannot give it a UAR of its own.)
 *   objects             a CQ (MASK_PD), an RC QP, an SRQ and an MR on the
 *                       parent domain; the MR names the parent domain.
 *   parent_busy         the parent domain cannot be deallocated (EBUSY)
 *                       while any of them remains.
 *   alloc_types         on mlx5, the allocator was asked for a CQ, a QP,
 *                       an SRQ buffer and a doorbell record for each
 *                       (MLX5DV_RES_TYPE_*), each with a nonzero size and
 *                       a power-of-two alignment, passed the parent domain
 *                       and its pd_context; elsewhere, never called.
 *   alloc_freed         once the objects are destroyed every buffer was
 *                       freed once, with the type it was allocated for.
 *   use_default         an allocator answering IBV_ALLOCATOR_USE_DEFAULT:
 *                       the QP is made, and free is never called.
 *   alloc_null          an allocator answering NULL: the QP is refused.
 *   dealloc_order       then the parent domain, its thread domain and its
 *                       protection domain are deallocated (0 each).
 *
 * usage: parent_domain DEVICE
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

/* mlx5dv.h's resource types (not included: rxe machines may lack it). */
#define RES(n) (((uint64_t)1 << 32) | (n))
#define RES_QP RES(1)
#define RES_DBR RES(3)
#define RES_SRQ RES(4)
#define RES_CQ RES(5)

static int failures;

static void ok(const char *name)
{
	printf("ok %s\n", name);
	fflush(stdout);
}

static void fail(const char *name, const char *why, long a)
{
	printf("FAIL %s: %s (%ld)\n", name, why, a);
	fflush(stdout);
	failures++;
}

static void die(const char *what, int err)
{
	printf("FAIL setup: %s: %s\n", what, strerror(err));
	exit(1);
}

/* What the allocators saw. */
#define MAX_BUFS 64
struct buf {
	void *ptr;
	size_t size;
	size_t align;
	uint64_t type;
	int freed;
};

struct recorder {
	int mode; /* 0: allocate, 1: USE_DEFAULT, 2: NULL */
	struct ibv_pd *parent;
	struct buf bufs[MAX_BUFS];
	int n;
	int bad_args;   /* wrong pd or pd_context */
	int bad_frees;  /* unknown pointer, wrong type or twice */
	int frees;
};

static struct recorder rec;

static void *rec_alloc(struct ibv_pd *pd, void *pd_context, size_t size,
		       size_t alignment, uint64_t type)
{
	struct recorder *r = pd_context;
	void *p = NULL;

	if (r != &rec || (r->parent && pd != r->parent))
		rec.bad_args++;
	if (r->mode == 1)
		return IBV_ALLOCATOR_USE_DEFAULT;
	if (r->mode == 2 || r->n == MAX_BUFS)
		return NULL;
	if (posix_memalign(&p, alignment < sizeof(void *) ? sizeof(void *) : alignment,
			   size ? size : 1))
		return NULL;
	memset(p, 0, size);
	r->bufs[r->n++] = (struct buf){ p, size, alignment, type, 0 };
	return p;
}

static void rec_free(struct ibv_pd *pd, void *pd_context, void *ptr, uint64_t type)
{
	struct recorder *r = pd_context;
	int i;

	if (r != &rec || pd != r->parent)
		rec.bad_args++;
	r->frees++;
	for (i = 0; i < r->n; i++)
		if (r->bufs[i].ptr == ptr)
			break;
	if (i == r->n || r->bufs[i].freed || r->bufs[i].type != type) {
		r->bad_frees++;
		return;
	}
	r->bufs[i].freed = 1;
	free(ptr);
}

/* How many buffers of `type` were allocated. */
static int count(uint64_t type)
{
	int c = 0;

	for (int i = 0; i < rec.n; i++)
		c += rec.bufs[i].type == type;
	return c;
}

static struct ibv_context *open_named(const char *name)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;

	if (!list)
		die("ibv_get_device_list", errno);
	for (int i = 0; list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!ctx)
		die("ibv_open_device", errno ? errno : ENODEV);
	return ctx;
}

static struct ibv_pd *parent_on(struct ibv_context *ctx, struct ibv_pd *pd,
				struct ibv_td *td, int with_alloc)
{
	struct ibv_parent_domain_init_attr a = {
		.pd = pd,
		.td = td,
	};

	if (with_alloc) {
		a.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS |
			      IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
		a.alloc = rec_alloc;
		a.free = rec_free;
		a.pd_context = &rec;
	}
	return ibv_alloc_parent_domain(ctx, &a);
}

static struct ibv_cq_ex *cq_on(struct ibv_context *ctx, struct ibv_pd *pd)
{
	struct ibv_cq_init_attr_ex a = {
		.cqe = 64,
		.wc_flags = IBV_WC_STANDARD_FLAGS,
		.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD,
		.parent_domain = pd,
	};

	return ibv_create_cq_ex(ctx, &a);
}

static struct ibv_qp *rc_qp_on(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};

	return ibv_create_qp(pd, &a);
}

int main(int argc, char **argv)
{
	struct ibv_context *ctx;
	struct ibv_pd *pd, *pad, *p;
	struct ibv_td *td;
	struct ibv_cq_ex *cqx;
	struct ibv_cq *plain_cq;
	struct ibv_qp *qp;
	struct ibv_srq *srq;
	struct ibv_mr *mr;
	static char mem[4096];
	int mlx5, r;

	if (argc < 2) {
		fprintf(stderr, "usage: parent_domain DEVICE\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	mlx5 = !strncmp(argv[1], "mlx5", 4);
	ctx = open_named(argv[1]);
	pd = ibv_alloc_pd(ctx);
	if (!pd)
		die("ibv_alloc_pd", errno);

	struct ibv_td_init_attr tda = { .comp_mask = 1 };
	errno = 0;
	td = ibv_alloc_td(ctx, &tda);
	if (!td && errno == EOPNOTSUPP) {
		printf("info thread domains: EOPNOTSUPP\n");
		printf("parent_domain: skipped (no thread or parent domains)\n");
		return 0;
	}
	if (td || errno != EINVAL)
		fail("td_comp_mask", "not EINVAL", errno);
	else
		ok("td_comp_mask");
	tda.comp_mask = 0;
	td = ibv_alloc_td(ctx, &tda);
	if (!td)
		/*
		 * libmlx5 gives a thread domain a UAR of its own, which the
		 * emulated ConnectX-5 cannot allocate: the checks go on
		 * without one there.
		 */
		printf("info ibv_alloc_td: %s; the checks run without a thread domain\n",
		       strerror(errno));

	struct ibv_parent_domain_init_attr pa = { .pd = NULL };
	errno = 0;
	p = ibv_alloc_parent_domain(ctx, &pa);
	if (p || errno != EINVAL)
		fail("pd_null", "not EINVAL", errno);
	else
		ok("pd_null");
	pa.pd = pd;
	pa.comp_mask = 1 << 7;
	errno = 0;
	p = ibv_alloc_parent_domain(ctx, &pa);
	if (p || errno != EINVAL)
		fail("pd_comp_mask", "not EINVAL", errno);
	else
		ok("pd_comp_mask");

	errno = 0;
	cqx = cq_on(ctx, pd);
	if (cqx || errno != EINVAL)
		fail("cq_plain_pd", "not EINVAL", errno);
	else
		ok("cq_plain_pd");

	pad = parent_on(ctx, pd, td, 1);
	if (!pad)
		die("ibv_alloc_parent_domain", errno);
	rec.parent = pad;
	r = td ? ibv_dealloc_td(td) : EBUSY;
	if (r != EBUSY)
		fail("busy_order", "ibv_dealloc_td of a used TD not EBUSY", r);
	else if ((r = ibv_dealloc_pd(pd)) != EBUSY)
		fail("busy_order", "ibv_dealloc_pd of a protection PD in use not EBUSY", r);
	else
		ok("busy_order");

	cqx = cq_on(ctx, pad);
	if (!cqx)
		die("ibv_create_cq_ex on the parent domain", errno);
	qp = rc_qp_on(pad, ibv_cq_ex_to_cq(cqx));
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	srq = ibv_create_srq(pad, &sa);
	mr = ibv_reg_mr(pad, mem, sizeof(mem), IBV_ACCESS_LOCAL_WRITE);
	if (!qp || !srq || !mr)
		fail("objects", "a QP, SRQ or MR on the parent domain failed", errno);
	else if (mr->pd != pad || qp->pd != pad || srq->pd != pad)
		fail("objects", "an object does not name the parent domain", 0);
	else
		ok("objects");

	int busy = 0;
	if (ibv_dealloc_pd(pad) != EBUSY)
		busy++;
	if (mr && (r = ibv_dereg_mr(mr)))
		die("ibv_dereg_mr", r);
	if (qp && ibv_dealloc_pd(pad) != EBUSY)
		busy++;
	if (qp && (r = ibv_destroy_qp(qp)))
		die("ibv_destroy_qp", r);
	if (srq && ibv_dealloc_pd(pad) != EBUSY)
		busy++;
	if (srq && (r = ibv_destroy_srq(srq)))
		die("ibv_destroy_srq", r);
	if (ibv_dealloc_pd(pad) != EBUSY)
		busy++;
	if (busy)
		fail("parent_busy", "ibv_dealloc_pd of a parent domain in use not EBUSY", busy);
	else
		ok("parent_busy");
	if ((r = ibv_destroy_cq(ibv_cq_ex_to_cq(cqx))))
		die("ibv_destroy_cq", r);

	printf("info allocations: %d (CQ %d, QP %d, SRQ %d, DBR %d)\n", rec.n,
	       count(RES_CQ), count(RES_QP), count(RES_SRQ), count(RES_DBR));
	int bad = 0;
	for (int i = 0; i < rec.n; i++) {
		struct buf *b = &rec.bufs[i];

		printf("info alloc type %u size %zu align %zu\n", (unsigned)(b->type & 0xffffffff),
		       b->size, b->align);
		if (!b->size || !b->align || (b->align & (b->align - 1)) ||
		    (uintptr_t)b->ptr % b->align)
			bad++;
	}
	if (mlx5 && (count(RES_CQ) != 1 || count(RES_QP) != 1 || count(RES_SRQ) != 1 ||
		     count(RES_DBR) != 3 || rec.n != 6))
		fail("alloc_types", "not one CQ, QP, SRQ buffer and three doorbell records", rec.n);
	else if (!mlx5 && rec.n)
		fail("alloc_types", "the allocator was called off mlx5", rec.n);
	else if (bad || rec.bad_args)
		fail("alloc_types", "a size, alignment, PD or pd_context is wrong", bad + rec.bad_args);
	else
		ok("alloc_types");
	int unfreed = 0;
	for (int i = 0; i < rec.n; i++)
		unfreed += !rec.bufs[i].freed;
	if (unfreed || rec.bad_frees || rec.frees != rec.n)
		fail("alloc_freed", "buffers not freed once each with their type",
		     unfreed + rec.bad_frees);
	else
		ok("alloc_freed");

	/* An allocator answering "use the default", then NULL. */
	rec.mode = 1;
	rec.n = rec.frees = 0;
	plain_cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!plain_cq)
		die("ibv_create_cq", errno);
	qp = rc_qp_on(pad, plain_cq);
	if (!qp)
		fail("use_default", "the QP was refused", errno);
	else if ((r = ibv_destroy_qp(qp)))
		die("ibv_destroy_qp", r);
	else if (rec.frees)
		fail("use_default", "free was called", rec.frees);
	else
		ok("use_default");
	rec.mode = 2;
	errno = 0;
	qp = rc_qp_on(pad, plain_cq);
	if (mlx5 && qp)
		fail("alloc_null", "the QP was made", 0);
	else if (!mlx5 && !qp)
		fail("alloc_null", "the QP was refused off mlx5", errno);
	else
		ok("alloc_null");
	if (qp)
		ibv_destroy_qp(qp);
	else
		printf("info alloc_null: %s\n", strerror(errno));

	/* A parent domain without allocators, on no TD: a plain QP. */
	p = parent_on(ctx, pd, NULL, 0);
	if (!p)
		die("ibv_alloc_parent_domain without a TD", errno);
	qp = rc_qp_on(p, plain_cq);
	if (!qp)
		die("a QP on a parent domain without a TD", errno);
	if ((r = ibv_destroy_qp(qp)) || (r = ibv_dealloc_pd(p)))
		die("destroying the QP and its parent domain", r);
	if ((r = ibv_destroy_cq(plain_cq)))
		die("ibv_destroy_cq", r);

	if ((r = ibv_dealloc_pd(pad)))
		fail("dealloc_order", "ibv_dealloc_pd of the parent domain", r);
	else if (td && (r = ibv_dealloc_td(td)))
		fail("dealloc_order", "ibv_dealloc_td", r);
	else if ((r = ibv_dealloc_pd(pd)))
		fail("dealloc_order", "ibv_dealloc_pd of the protection domain", r);
	else
		ok("dealloc_order");
	if (ibv_close_device(ctx))
		die("ibv_close_device", errno);
	printf("parent_domain: %s (%d failed)\n", failures ? "FAIL" : "ok", failures);
	return failures ? 1 : 0;
}
