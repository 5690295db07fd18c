/*
 * rules.c: libibverbs' documented rules on object lifetimes, event
 * acknowledgement, blocking waits, signals and re-registration, checked on
 * whichever libibverbs.so.1 the loader picks. Test-only: `cargo xtask
 * ibverbs` builds it as target/ibverbs/<profile>/c-tests/rules, and
 * tests/vm/ibverbs_rules.sh runs it on rdma-core's library (the reference:
 * every check must pass there) and on ours, and compares the verdicts.
 *
 * Each check prints one line, "ok NAME" or "FAIL NAME: why"; lines
 * starting with "info" are facts that may differ between libraries (what
 * the kernel or the provider refused) and are not verdicts. Exits 0 if
 * every check passed. A watchdog ends a hang (a check that blocks for
 * good) with a FAIL line.
 *
 * The checks:
 *   cq_destroy_waits_for_ack  ibv_destroy_cq waits until the completion
 *                             event another thread holds is acknowledged
 *                             (ibv_get_cq_event(3)).
 *   cq_event_eintr            a signal handler installed without
 *                             SA_RESTART ends a blocked ibv_get_cq_event
 *                             with -1 and EINTR.
 *   cq_event_restart          with SA_RESTART the wait goes on, and the
 *                             event that comes after is returned.
 *   async_fd_blocks           ibv_open_device's async_fd is blocking, and a
 *                             blocked ibv_get_async_event returns the
 *                             SQ_DRAINED event of a QP moved to SQD, its
 *                             element the program's QP pointer.
 *   async_event_eintr         a signal without SA_RESTART ends a blocked
 *                             ibv_get_async_event with -1 and EINTR.
 *   async_fd_nonblocking      once the program sets O_NONBLOCK on
 *                             async_fd, ibv_get_async_event fails at once
 *                             with EAGAIN.
 *   rereg_failure_unchanged   a failed ibv_rereg_mr(CHANGE_PD |
 *                             CHANGE_ACCESS) (an unknown access bit; a
 *                             refused combination) leaves the MR's PD and
 *                             keys as they were: the new PD can be
 *                             deallocated, the old one cannot.
 *   destroy_qp_busy           a UD QP attached to a multicast group cannot
 *                             be destroyed (EBUSY), and its CQ and PD still
 *                             count it; once detached, it, its CQ and PD
 *                             go.
 *   ece_unsupported           on a provider without ECE (rxe),
 *                             ibv_query_ece and ibv_set_ece return
 *                             EOPNOTSUPP and leave the struct as it was.
 *
 * usage: rules DEVICE GID_INDEX [GROUP...]
 * GROUP is one of cq_destroy, cq_signals, async, rereg, destroy_qp, ece (the
 * checks of one function below); without any, all run.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#define PAIR_PROG "rules"
/* The bench probes' set-up (tools/bench/pair.h); not all of it is used. */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "pair.h"

/* How long a check may block before the watchdog calls it hung. */
#define HANG_SECS 30

static const char *dev_name;
static int gid_index;
static int failures;
/* The check running, for the watchdog. */
static _Atomic(const char *) current = "setup";

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

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void sleep_ms(long ms)
{
	struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&t, &t) && errno == EINTR)
		;
}

static void *watchdog(void *arg)
{
	(void)arg;
	for (;;) {
		const char *at = current;

		sleep(HANG_SECS);
		if (at == current) {
			printf("FAIL %s: still blocked after %d s\n", at, HANG_SECS);
			fflush(stdout);
			_exit(1);
		}
	}
	return NULL;
}

/* One RC pair on `ctx`: QP a (send and receive on `cq_a`) and QP b (on
 * `cq_b`), connected, with a registered buffer. */
struct pair {
	struct ibv_pd *pd;
	struct ibv_qp *a, *b;
	uint8_t *buf;
	struct ibv_mr *mr;
};

static void make_pair(struct ibv_context *ctx, struct pair *p,
		      struct ibv_cq *cq_a, struct ibv_cq *cq_b)
{
	struct ibv_qp_init_attr qa;

	p->pd = ibv_alloc_pd(ctx);
	if (!p->pd)
		die("ibv_alloc_pd", errno);
	pair_buffer(p->pd, &p->buf, &p->mr);
	pair_qp_attr(&qa, cq_a, 16);
	p->a = ibv_create_qp(p->pd, &qa);
	if (!p->a)
		die("ibv_create_qp", errno);
	pair_qp_attr(&qa, cq_b, 16);
	p->b = ibv_create_qp(p->pd, &qa);
	if (!p->b)
		die("ibv_create_qp", errno);
	connect_pair(ctx, p->a, p->b, gid_index);
}

static void free_pair(struct pair *p)
{
	if (ibv_destroy_qp(p->a) || ibv_destroy_qp(p->b) ||
	    ibv_dereg_mr(p->mr) || ibv_dealloc_pd(p->pd))
		die("freeing the pair", errno);
	free(p->buf);
}

/* Posts a signaled RDMA WRITE of 64 bytes from a to b's buffer. */
static void post_write(struct pair *p)
{
	struct ibv_send_wr wr, *bad;
	struct ibv_sge sge;
	int rc;

	pair_send_wr(&wr, &sge, p->buf, 64, p->mr->lkey);
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.wr.rdma.remote_addr = (uintptr_t)p->buf + 1024;
	wr.wr.rdma.rkey = p->mr->rkey;
	rc = ibv_post_send(p->a, &wr, &bad);
	if (rc)
		die("ibv_post_send", rc);
}

/* ---- cq_destroy_waits_for_ack -------------------------------------- */

struct holder {
	struct ibv_comp_channel *ch;
	struct ibv_cq *got;
	atomic_int have_event;
	atomic_int acking;
	int rc, err;
};

static void *hold_event(void *arg)
{
	struct holder *h = arg;
	void *cq_ctx;

	h->rc = ibv_get_cq_event(h->ch, &h->got, &cq_ctx);
	h->err = errno;
	atomic_store(&h->have_event, 1);
	if (h->rc)
		return NULL;
	/* Hold the event while the main thread destroys the CQ. */
	sleep_ms(300);
	atomic_store(&h->acking, 1);
	ibv_ack_cq_events(h->got, 1);
	return NULL;
}

static void check_cq_destroy_waits(struct ibv_context *ctx)
{
	const char *name = "cq_destroy_waits_for_ack";
	struct holder h = { 0 };
	struct ibv_cq *cq, *other;
	struct ibv_wc wc;
	struct pair p;
	pthread_t t;
	double t0, waited;
	int rc;

	current = name;
	h.ch = ibv_create_comp_channel(ctx);
	if (!h.ch)
		die("ibv_create_comp_channel", errno);
	cq = ibv_create_cq(ctx, 16, NULL, h.ch, 0);
	other = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!cq || !other)
		die("ibv_create_cq", errno);
	make_pair(ctx, &p, cq, other);
	if ((rc = ibv_req_notify_cq(cq, 0)))
		die("ibv_req_notify_cq", rc);
	pthread_create(&t, NULL, hold_event, &h);
	post_write(&p);
	while (!atomic_load(&h.have_event))
		sleep_ms(1);
	if (h.rc || h.got != cq) {
		fail(name, "ibv_get_cq_event did not return the CQ", h.err);
		pthread_join(t, NULL);
		return;
	}
	while (ibv_poll_cq(cq, 1, &wc) == 0)
		;
	free_pair(&p);
	t0 = now_ms();
	rc = ibv_destroy_cq(cq);
	waited = now_ms() - t0;
	if (rc)
		fail(name, "ibv_destroy_cq failed", rc);
	else if (!atomic_load(&h.acking))
		fail(name, "ibv_destroy_cq returned before the event was acknowledged (ms)",
		     (long)waited);
	else
		ok(name);
	pthread_join(t, NULL);
	printf("info %s: ibv_destroy_cq returned after %.0f ms\n", name, waited);
	if (ibv_destroy_cq(other) || ibv_destroy_comp_channel(h.ch))
		die("freeing the CQs", errno);
}

/* ---- signals --------------------------------------------------------- */

static atomic_int signals_seen;

static void on_signal(int sig)
{
	(void)sig;
	atomic_fetch_add(&signals_seen, 1);
}

/* Installs on_signal for SIGUSR1, with SA_RESTART or without. */
static void handle_usr1(int restart)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sa.sa_flags = restart ? SA_RESTART : 0;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGUSR1, &sa, NULL))
		die("sigaction", errno);
}

struct kicker {
	pthread_t target;
	long after_ms;
	/* If set, posted after the signal (makes the awaited CQ fire). */
	struct pair *then_write;
	long write_after_ms;
};

static void *kick(void *arg)
{
	struct kicker *k = arg;

	sleep_ms(k->after_ms);
	pthread_kill(k->target, SIGUSR1);
	if (k->then_write) {
		sleep_ms(k->write_after_ms);
		post_write(k->then_write);
	}
	return NULL;
}

/* Starts a thread that signals this one after `ms` (and, with `p`,
 * posts a WRITE on it `write_ms` later). */
static pthread_t kick_me(struct kicker *k, long ms, struct pair *p, long write_ms)
{
	pthread_t t;

	k->target = pthread_self();
	k->after_ms = ms;
	k->then_write = p;
	k->write_after_ms = write_ms;
	pthread_create(&t, NULL, kick, k);
	return t;
}

static void check_cq_event_signals(struct ibv_context *ctx)
{
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq, *other, *got;
	struct kicker k;
	struct ibv_wc wc;
	struct pair p;
	pthread_t t;
	void *cq_ctx;
	int rc, err, before;
	double t0, took;

	ch = ibv_create_comp_channel(ctx);
	if (!ch)
		die("ibv_create_comp_channel", errno);
	cq = ibv_create_cq(ctx, 16, (void *)0x5eed, ch, 0);
	other = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!cq || !other)
		die("ibv_create_cq", errno);
	make_pair(ctx, &p, cq, other);
	if ((rc = ibv_req_notify_cq(cq, 0)))
		die("ibv_req_notify_cq", rc);

	/* Without SA_RESTART: the signal ends the wait. */
	current = "cq_event_eintr";
	handle_usr1(0);
	before = atomic_load(&signals_seen);
	t = kick_me(&k, 200, NULL, 0);
	t0 = now_ms();
	rc = ibv_get_cq_event(ch, &got, &cq_ctx);
	err = errno;
	took = now_ms() - t0;
	pthread_join(t, NULL);
	if (rc != -1 || err != EINTR)
		fail(current, "ibv_get_cq_event did not fail with EINTR (rc)", rc);
	else if (atomic_load(&signals_seen) == before || took < 150)
		fail(current, "returned before the signal (ms)", (long)took);
	else
		ok(current);

	/* With SA_RESTART: the wait goes on until the CQ fires. */
	current = "cq_event_restart";
	handle_usr1(1);
	before = atomic_load(&signals_seen);
	t = kick_me(&k, 200, &p, 300);
	t0 = now_ms();
	rc = ibv_get_cq_event(ch, &got, &cq_ctx);
	err = errno;
	took = now_ms() - t0;
	pthread_join(t, NULL);
	if (rc != 0)
		fail(current, "ibv_get_cq_event failed (errno)", err);
	else if (got != cq || cq_ctx != (void *)0x5eed)
		fail(current, "the event names another CQ", 0);
	else if (atomic_load(&signals_seen) == before || took < 400)
		fail(current, "returned before the completion (ms)", (long)took);
	else
		ok(current);
	if (rc == 0)
		ibv_ack_cq_events(cq, 1);
	while (ibv_poll_cq(cq, 1, &wc) == 0)
		;
	free_pair(&p);
	if (ibv_destroy_cq(cq) || ibv_destroy_cq(other) ||
	    ibv_destroy_comp_channel(ch))
		die("freeing the CQs", errno);
}

/* ---- the async fd ---------------------------------------------------- */

static void check_async_fd(struct ibv_context *ctx)
{
	struct ibv_async_event ev;
	struct ibv_qp_attr a;
	struct ibv_cq *cq;
	struct kicker k;
	struct pair p;
	pthread_t t;
	int flags, rc, err, before;
	double t0, took;

	current = "async_fd_blocks";
	flags = fcntl(ctx->async_fd, F_GETFL);
	if (flags < 0 || (flags & O_NONBLOCK)) {
		fail(current, "async_fd is non-blocking after ibv_open_device (flags)", flags);
	} else {
		cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		if (!cq)
			die("ibv_create_cq", errno);
		make_pair(ctx, &p, cq, cq);
		/* rxe drains (and raises the event) once the send queue has
		 * run: one WRITE, completed, first. */
		post_write(&p);
		{
			struct ibv_wc wc;

			while (ibv_poll_cq(cq, 1, &wc) == 0)
				;
			if (wc.status != IBV_WC_SUCCESS)
				die("the WRITE before SQD", EIO);
		}
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_SQD;
		rc = ibv_modify_qp(p.a, &a, IBV_QP_STATE);
		if (rc) {
			fail(current, "ibv_modify_qp to SQD failed", rc);
		} else {
			rc = ibv_get_async_event(ctx, &ev);
			if (rc)
				fail(current, "ibv_get_async_event failed (errno)", errno);
			else if (ev.event_type != IBV_EVENT_SQ_DRAINED ||
				 ev.element.qp != p.a)
				fail(current, "not the QP's SQ_DRAINED (type)", ev.event_type);
			else
				ok(current);
			if (rc == 0)
				ibv_ack_async_event(&ev);
		}
		free_pair(&p);
		if (ibv_destroy_cq(cq))
			die("ibv_destroy_cq", errno);
	}

	current = "async_event_eintr";
	handle_usr1(0);
	before = atomic_load(&signals_seen);
	t = kick_me(&k, 200, NULL, 0);
	t0 = now_ms();
	rc = ibv_get_async_event(ctx, &ev);
	err = errno;
	took = now_ms() - t0;
	pthread_join(t, NULL);
	if (rc != -1 || err != EINTR)
		fail(current, "ibv_get_async_event did not fail with EINTR (errno)", err);
	else if (atomic_load(&signals_seen) == before || took < 150)
		fail(current, "returned before the signal (ms)", (long)took);
	else
		ok(current);
	if (rc == 0)
		ibv_ack_async_event(&ev);

	current = "async_fd_nonblocking";
	flags = fcntl(ctx->async_fd, F_GETFL);
	if (flags < 0 || fcntl(ctx->async_fd, F_SETFL, flags | O_NONBLOCK))
		die("fcntl", errno);
	t0 = now_ms();
	rc = ibv_get_async_event(ctx, &ev);
	err = errno;
	took = now_ms() - t0;
	if (rc != -1 || err != EAGAIN)
		fail(current, "ibv_get_async_event did not fail with EAGAIN (errno)", err);
	else if (took > 100)
		fail(current, "it waited (ms)", (long)took);
	else
		ok(current);
	if (rc == 0)
		ibv_ack_async_event(&ev);
	fcntl(ctx->async_fd, F_SETFL, flags);
}

/* ---- ibv_rereg_mr ---------------------------------------------------- */

static void check_rereg(struct ibv_context *ctx)
{
	const char *name = "rereg_failure_unchanged";
	struct ibv_pd *pd1, *pd2;
	struct ibv_mr *mr;
	uint32_t lkey, rkey;
	uint8_t *buf;
	int rc, rc2, err, err2;

	current = name;
	pd1 = ibv_alloc_pd(ctx);
	pd2 = ibv_alloc_pd(ctx);
	if (!pd1 || !pd2)
		die("ibv_alloc_pd", errno);
	pair_buffer(pd1, &buf, &mr);
	lkey = mr->lkey;
	rkey = mr->rkey;
	/* An access bit libibverbs does not define (1 << 15). */
	rc = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS,
			  pd2, NULL, 0, IBV_ACCESS_LOCAL_WRITE | (1 << 15));
	err = errno;
	/* Remote write without local write: refused by every layer. */
	rc2 = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS,
			   pd2, NULL, 0, IBV_ACCESS_REMOTE_WRITE);
	err2 = errno;
	printf("info %s: unknown bit: %d (%s); remote write alone: %d (%s)\n",
	       name, rc, strerror(err), rc2, strerror(err2));
	if (rc == 0 || rc2 == 0)
		fail(name, "a bad re-registration succeeded", rc == 0 ? 1 : 2);
	else if (mr->pd != pd1)
		fail(name, "the failed call moved the MR to the new PD", 0);
	else if (mr->lkey != lkey || mr->rkey != rkey)
		fail(name, "the failed call changed the keys", 0);
	else if ((rc = ibv_dealloc_pd(pd2)) != 0)
		fail(name, "the new PD cannot be deallocated (errno)", rc);
	else if ((rc = ibv_dealloc_pd(pd1)) != EBUSY)
		fail(name, "the old PD does not count the MR (dealloc answered)", rc);
	else
		ok(name);
	if (ibv_dereg_mr(mr) || ibv_dealloc_pd(pd1))
		die("freeing the MR", errno);
	free(buf);
}

/* ---- ibv_destroy_qp refused ------------------------------------------ */

static void check_destroy_qp_busy(struct ibv_context *ctx)
{
	const char *name = "destroy_qp_busy";
	/* An IPv4 multicast group as a RoCE GID, ::ffff:239.7.7.7. */
	union ibv_gid mgid = { .raw = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff,
					239, 7, 7, 7 } };
	struct ibv_qp_init_attr qa;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	int rc;

	current = name;
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!pd || !cq)
		die("ibv_alloc_pd/ibv_create_cq", errno);
	memset(&qa, 0, sizeof(qa));
	qa.send_cq = cq;
	qa.recv_cq = cq;
	qa.qp_type = IBV_QPT_UD;
	qa.cap.max_send_wr = 4;
	qa.cap.max_recv_wr = 4;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	qp = ibv_create_qp(pd, &qa);
	if (!qp)
		die("ibv_create_qp", errno);
	if ((rc = ibv_attach_mcast(qp, &mgid, 0))) {
		fail(name, "ibv_attach_mcast failed", rc);
	} else if ((rc = ibv_destroy_qp(qp)) != EBUSY) {
		fail(name, "ibv_destroy_qp of an attached QP answered", rc);
		/* 0: the QP is gone, whatever this library thinks. */
		if (rc == 0)
			qp = NULL;
	} else if ((rc = ibv_destroy_cq(cq)) != EBUSY) {
		fail(name, "its CQ stopped counting it (ibv_destroy_cq answered)", rc);
		if (rc == 0)
			cq = NULL;
	} else if ((rc = ibv_dealloc_pd(pd)) != EBUSY) {
		fail(name, "its PD stopped counting it (ibv_dealloc_pd answered)", rc);
		if (rc == 0)
			pd = NULL;
	} else if ((rc = ibv_detach_mcast(qp, &mgid, 0))) {
		fail(name, "ibv_detach_mcast failed", rc);
	} else if ((rc = ibv_destroy_qp(qp))) {
		fail(name, "ibv_destroy_qp after detaching failed", rc);
	} else {
		qp = NULL;
		if ((rc = ibv_destroy_cq(cq)))
			fail(name, "the CQ still counts the destroyed QP", rc);
		else if ((cq = NULL, rc = ibv_dealloc_pd(pd)))
			fail(name, "the PD still counts the destroyed QP", rc);
		else
			ok(name), pd = NULL;
	}
	/* What is left of a failure; nothing on success. */
	if (qp) {
		ibv_detach_mcast(qp, &mgid, 0);
		ibv_destroy_qp(qp);
	}
	if (cq)
		ibv_destroy_cq(cq);
	if (pd)
		ibv_dealloc_pd(pd);
}

/* ---- ECE ------------------------------------------------------------- */

static void check_ece(struct ibv_context *ctx)
{
	const char *name = "ece_unsupported";
	struct ibv_cq *cq;
	struct pair p;
	struct ibv_ece ece;
	int rc;

	current = name;
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!cq)
		die("ibv_create_cq", errno);
	make_pair(ctx, &p, cq, cq);
	memset(&ece, 0x5a, sizeof(ece));
	if ((rc = ibv_query_ece(p.a, &ece)) != EOPNOTSUPP) {
		fail(name, "ibv_query_ece answered", rc);
	} else if (ece.vendor_id != 0x5a5a5a5a || ece.options != 0x5a5a5a5a) {
		fail(name, "ibv_query_ece wrote the struct though it failed", 0);
	} else {
		ece.vendor_id = 0x15b3;
		ece.options = 1;
		ece.comp_mask = 0;
		if ((rc = ibv_set_ece(p.a, &ece)) != EOPNOTSUPP)
			fail(name, "ibv_set_ece answered", rc);
		else
			ok(name);
	}
	free_pair(&p);
	if (ibv_destroy_cq(cq))
		die("ibv_destroy_cq", errno);
}

/* The checks, by group name. */
static const struct {
	const char *name;
	void (*check)(struct ibv_context *);
} groups[] = {
	{ "cq_destroy", check_cq_destroy_waits },
	{ "cq_signals", check_cq_event_signals },
	{ "async", check_async_fd },
	{ "rereg", check_rereg },
	{ "destroy_qp", check_destroy_qp_busy },
	{ "ece", check_ece },
};

int main(int argc, char **argv)
{
	struct ibv_context *ctx;
	pthread_t dog;

	if (argc < 3) {
		fprintf(stderr, "usage: rules DEVICE GID_INDEX [GROUP...]\n");
		return 2;
	}
	dev_name = argv[1];
	gid_index = atoi(argv[2]);
	setvbuf(stdout, NULL, _IOLBF, 0);
	pthread_create(&dog, NULL, watchdog, NULL);
	ctx = open_named(dev_name);
	for (size_t i = 0; i < sizeof(groups) / sizeof(groups[0]); i++) {
		int run = argc == 3;

		for (int a = 3; a < argc; a++)
			run |= !strcmp(argv[a], groups[i].name);
		if (run)
			groups[i].check(ctx);
	}
	if (ibv_close_device(ctx))
		die("ibv_close_device", errno);
	printf("rules: %s (%d failed)\n", failures ? "FAIL" : "ok", failures);
	return failures ? 1 : 0;
}
