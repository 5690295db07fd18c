/*
 * threads.c: libibverbs' thread-safety promise (several threads may post to
 * one QP and poll one CQ at once), checked on whichever libibverbs.so.1 the
 * loader picks. Test-only: `cargo xtask ibverbs` builds it as
 * target/ibverbs/<profile>/c-tests/threads, and tests/vm/ibverbs_threads.sh
 * runs it on rdma-core's library and on ours.
 *
 * Two RC QPs on one device, A and B, connected to each other. At once:
 *   - SENDERS threads post signaled 64-byte SENDs on A (wr_id = thread << 32
 *     | sequence; the payload repeats the wr_id), each from its own slots;
 *   - 2 threads keep B's receive queue filled (wr_id = buffer slot);
 *   - 2 threads poll A's CQ and 2 poll B's CQ.
 * It checks that every completion succeeds with the right opcode, that
 * every SEND's wr_id comes back exactly once on A's CQ (in order per
 * sender within one poll: a QP completes in order), and that every message arrives once on
 * B, intact (length and every byte). Exits 0 and prints "threads: ok" with
 * the counts, or exits 1 naming the first fault; an alarm ends a hang.
 *
 * usage: threads DEVICE GID_INDEX [MESSAGES_PER_SENDER]   (default 2000)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#define PAIR_PROG "threads"
/* The bench probes' set-up (tools/bench/pair.h); not all of it is used. */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "pair.h"

#define SENDERS 4
#define RECVERS 2
#define POLLERS 2
#define MSG 64
/* Each sender's slots: at most this many of its SENDs outstanding. */
#define PER_SENDER 16
#define SQ_DEPTH (SENDERS * PER_SENDER)
#define RQ_DEPTH 128
#define LIMIT_SECS 120

static struct ibv_qp *qa, *qb;
static struct ibv_cq *cqa, *cqb;
static uint8_t *sbuf, *rbuf;
static struct ibv_mr *smr, *rmr;
static long per_sender;
static long total;

/* Per sender: SENDs posted and not yet polled. */
static atomic_long outstanding[SENDERS];
/* Receive slots: a stack of free ones under a lock (the test's own). */
static pthread_mutex_t free_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t free_slots[RQ_DEPTH];
static int nfree;
static atomic_long recvs_posted, sends_done, recvs_done;
/* Every message seen on B, and every SEND completed on A: one byte per
 * (sender, sequence). */
static atomic_uchar *seen, *sent_seen;

static void fail(const char *what, long a, long b)
{
	fprintf(stderr, "threads: FAIL: %s (%ld, %ld)\n", what, a, b);
	exit(1);
}

static uint8_t fill_byte(uint64_t id, int i)
{
	return (uint8_t)(id * 131 + (id >> 32) * 7 + (uint64_t)i);
}

static void *sender(void *arg)
{
	long t = (long)arg;

	for (long seq = 0; seq < per_sender; seq++) {
		uint64_t id = ((uint64_t)t << 32) | (uint64_t)seq;
		uint8_t *msg = sbuf + ((size_t)t * PER_SENDER + (size_t)(seq % PER_SENDER)) * MSG;
		struct ibv_sge sge;
		struct ibv_send_wr wr, *bad = NULL;
		int rc;

		/* The slot is free once its SEND of PER_SENDER ago completed. */
		while (atomic_load(&outstanding[t]) >= PER_SENDER)
			sched_yield();
		for (int i = 0; i < MSG; i++)
			msg[i] = fill_byte(id, i);
		memcpy(msg, &id, sizeof(id));
		pair_send_wr(&wr, &sge, msg, MSG, smr->lkey);
		wr.wr_id = id;
		atomic_fetch_add(&outstanding[t], 1);
		rc = ibv_post_send(qa, &wr, &bad);
		if (rc)
			fail("ibv_post_send", t, rc);
		if (bad)
			fail("ibv_post_send set bad_wr on success", t, seq);
	}
	return NULL;
}

static void *recver(void *arg)
{
	(void)arg;
	while (atomic_load(&recvs_posted) < total) {
		struct ibv_sge sge;
		struct ibv_recv_wr wr, *bad = NULL;
		uint32_t slot;
		int rc;

		pthread_mutex_lock(&free_lock);
		if (!nfree || atomic_load(&recvs_posted) >= total) {
			pthread_mutex_unlock(&free_lock);
			sched_yield();
			continue;
		}
		slot = free_slots[--nfree];
		atomic_fetch_add(&recvs_posted, 1);
		pthread_mutex_unlock(&free_lock);
		memset(rbuf + (size_t)slot * MSG, 0, MSG);
		pair_recv_wr(&wr, &sge, rbuf + (size_t)slot * MSG, MSG, rmr->lkey);
		wr.wr_id = slot;
		rc = ibv_post_recv(qb, &wr, &bad);
		if (rc)
			fail("ibv_post_recv", slot, rc);
	}
	return NULL;
}

static void send_done(const struct ibv_wc *wc, long *last_seq)
{
	long t = (long)(wc->wr_id >> 32), seq = (long)(uint32_t)wc->wr_id;

	if (wc->status != IBV_WC_SUCCESS)
		fail("send completion status", (long)wc->wr_id, wc->status);
	if (wc->opcode != IBV_WC_SEND)
		fail("send completion opcode", (long)wc->wr_id, wc->opcode);
	if (t >= SENDERS || seq >= per_sender)
		fail("send completion wr_id", t, seq);
	/* In order per sender within one poll's batch (pollers race each
	 * other between polls, so only a batch's order is theirs). */
	if (seq <= last_seq[t])
		fail("send completions out of order in one poll", last_seq[t], seq);
	last_seq[t] = seq;
	if (atomic_exchange(&sent_seen[t * per_sender + seq], 1))
		fail("send completion twice", t, seq);
	atomic_fetch_sub(&outstanding[t], 1);
	atomic_fetch_add(&sends_done, 1);
}

static void recv_done(const struct ibv_wc *wc)
{
	uint32_t slot = (uint32_t)wc->wr_id;
	const uint8_t *msg;
	uint64_t id;
	long t, seq;

	if (wc->status != IBV_WC_SUCCESS)
		fail("receive completion status", (long)wc->wr_id, wc->status);
	if (wc->opcode != IBV_WC_RECV || wc->byte_len != MSG)
		fail("receive completion opcode/length", wc->opcode, wc->byte_len);
	if (slot >= RQ_DEPTH)
		fail("receive completion wr_id", slot, 0);
	msg = rbuf + (size_t)slot * MSG;
	memcpy(&id, msg, sizeof(id));
	t = (long)(id >> 32);
	seq = (long)(uint32_t)id;
	if (t >= SENDERS || seq >= per_sender)
		fail("received message names no SEND", t, seq);
	for (int i = (int)sizeof(id); i < MSG; i++)
		if (msg[i] != fill_byte(id, i))
			fail("received message corrupt at byte", (long)id, i);
	if (atomic_exchange(&seen[t * per_sender + seq], 1))
		fail("message received twice", t, seq);
	pthread_mutex_lock(&free_lock);
	free_slots[nfree++] = slot;
	pthread_mutex_unlock(&free_lock);
	atomic_fetch_add(&recvs_done, 1);
}

static void *poller(void *arg)
{
	int on_b = (int)(long)arg;
	struct ibv_cq *cq = on_b ? cqb : cqa;
	atomic_long *done = on_b ? &recvs_done : &sends_done;
	struct ibv_wc wc[8];

	while (atomic_load(done) < total) {
		int n = ibv_poll_cq(cq, 8, wc);

		if (n < 0)
			fail("ibv_poll_cq", on_b, n);
		long last_seq[SENDERS] = { -1, -1, -1, -1 };

		for (int i = 0; i < n; i++) {
			if (on_b)
				recv_done(&wc[i]);
			else
				send_done(&wc[i], last_seq);
		}
		if (!n)
			sched_yield();
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t th[SENDERS + RECVERS + 2 * POLLERS];
	struct ibv_qp_init_attr qia;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	int nth = 0, rc;

	if (argc < 3 || argc > 4) {
		fprintf(stderr, "usage: threads DEVICE GID_INDEX [MESSAGES_PER_SENDER]\n");
		return 2;
	}
	per_sender = argc == 4 ? strtol(argv[3], NULL, 10) : 2000;
	if (per_sender <= 0 || per_sender > 1000000) {
		fprintf(stderr, "threads: MESSAGES_PER_SENDER must be 1..1000000\n");
		return 2;
	}
	total = per_sender * SENDERS;
	alarm(LIMIT_SECS);

	ctx = open_named(argv[1]);
	pd = ibv_alloc_pd(ctx);
	if (!pd)
		die("ibv_alloc_pd", errno);
	cqa = ibv_create_cq(ctx, SQ_DEPTH, NULL, NULL, 0);
	cqb = ibv_create_cq(ctx, RQ_DEPTH, NULL, NULL, 0);
	if (!cqa || !cqb)
		die("ibv_create_cq", errno);
	pair_qp_attr(&qia, cqa, SQ_DEPTH);
	qa = ibv_create_qp(pd, &qia);
	pair_qp_attr(&qia, cqb, RQ_DEPTH);
	qb = ibv_create_qp(pd, &qia);
	if (!qa || !qb)
		die("ibv_create_qp", errno);
	connect_pair(ctx, qa, qb, atoi(argv[2]));

	if (posix_memalign((void **)&sbuf, 4096, SQ_DEPTH * MSG) ||
	    posix_memalign((void **)&rbuf, 4096, RQ_DEPTH * MSG))
		die("posix_memalign", ENOMEM);
	smr = ibv_reg_mr(pd, sbuf, SQ_DEPTH * MSG, IBV_ACCESS_LOCAL_WRITE);
	rmr = ibv_reg_mr(pd, rbuf, RQ_DEPTH * MSG, IBV_ACCESS_LOCAL_WRITE);
	if (!smr || !rmr)
		die("ibv_reg_mr", errno);
	seen = calloc((size_t)total, sizeof(*seen));
	sent_seen = calloc((size_t)total, sizeof(*sent_seen));
	if (!seen || !sent_seen)
		die("calloc", ENOMEM);
	for (uint32_t s = 0; s < RQ_DEPTH; s++)
		free_slots[nfree++] = s;

	/* Receivers and pollers first, so that early SENDs find receives. */
	for (long k = 0; k < RECVERS; k++)
		if ((rc = pthread_create(&th[nth++], NULL, recver, (void *)k)))
			die("pthread_create", rc);
	for (long k = 0; k < 2 * POLLERS; k++)
		if ((rc = pthread_create(&th[nth++], NULL, poller, (void *)(k % 2))))
			die("pthread_create", rc);
	for (long k = 0; k < SENDERS; k++)
		if ((rc = pthread_create(&th[nth++], NULL, sender, (void *)k)))
			die("pthread_create", rc);
	for (int k = 0; k < nth; k++)
		pthread_join(th[k], NULL);

	for (long k = 0; k < total; k++)
		if (!seen[k])
			fail("message never received", k / per_sender, k % per_sender);
	for (long k = 0; k < total; k++)
		if (!sent_seen[k])
			fail("SEND never completed", k / per_sender, k % per_sender);
	if (ibv_destroy_qp(qa) || ibv_destroy_qp(qb) || ibv_dereg_mr(smr) ||
	    ibv_dereg_mr(rmr) || ibv_destroy_cq(cqa) || ibv_destroy_cq(cqb) ||
	    ibv_dealloc_pd(pd) || ibv_close_device(ctx))
		die("teardown", errno);
	printf("threads: ok: %d senders x %ld SENDs on one QP, %d threads posting receives on one QP, %d pollers on each CQ; %ld SEND and %ld receive completions\n",
	       SENDERS, per_sender, RECVERS, POLLERS, atomic_load(&sends_done), atomic_load(&recvs_done));
	return 0;
}
