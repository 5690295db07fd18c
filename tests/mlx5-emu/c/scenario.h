/*
 * Test-only helpers shared by the scenario programs of tests/mlx5-emu/c
 * (rdma-core's libibverbs + libmlx5 against the emulated mlx5 device):
 * the "PASS <step>" / "FAIL <step>: <why>" line protocol `cargo xtask
 * mlx5` reads, checks of verbs calls, a monotonic clock for bounded waits,
 * and the RESET -> INIT -> RTR -> RTS sequences on port 1.
 *
 * Everything is `static inline`, so a program that uses only part of it
 * still builds with -Wall -Wextra -Werror.
 */
#ifndef MLX5_EMU_SCENARIO_H
#define MLX5_EMU_SCENARIO_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

static inline void pass(const char *step)
{
	printf("PASS %s\n", step);
	fflush(stdout);
}

/* Reports the failed step and exits 1. */
static inline void fail(const char *step, const char *why)
{
	printf("FAIL %s: %s\n", step, why);
	fflush(stdout);
	exit(1);
}

/* A call returning 0 or an errno value. */
static inline void check_ret(const char *step, int ret)
{
	if (ret)
		fail(step, strerror(ret));
}

/* A call returning a pointer, NULL with errno on failure. */
static inline void *check_ptr(const char *step, void *p)
{
	if (!p)
		fail(step, strerror(errno ? errno : EIO));
	return p;
}

/* A condition on returned values. */
static inline void expect(const char *step, int ok, const char *what)
{
	if (!ok)
		fail(step, what);
}

static inline long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/*
 * RESET -> INIT -> RTR -> RTS for an RC or UC QP on port 1 towards QP
 * `dest` at LID `lid` (PSNs 0; RC: all remote access, 4 reads/atomics in
 * flight, RNR timer 1, timeout 14, retry 7, RNR retry `rnr_retry`).
 */
static inline void connect_rc(struct ibv_qp *qp, uint32_t dest, uint16_t lid,
			      int rnr_retry)
{
	int rc = qp->qp_type == IBV_QPT_RC;
	struct ibv_qp_attr a;
	int mask;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	if (rc)
		a.qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	check_ret("to_init", ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
						   IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = 0;
	a.ah_attr.dlid = lid;
	a.ah_attr.port_num = 1;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 1;
	mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
	       IBV_QP_RQ_PSN;
	if (rc)
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	check_ret("to_rtr", ibv_modify_qp(qp, &a, mask));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = rnr_retry;
	a.max_rd_atomic = 4;
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (rc)
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			IBV_QP_MAX_QP_RD_ATOMIC;
	check_ret("to_rts", ibv_modify_qp(qp, &a, mask));
}

/* RESET -> INIT -> RTR -> RTS for a UD QP on port 1 with Q_Key `qkey`. */
static inline void connect_ud(struct ibv_qp *qp, uint32_t qkey)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qkey = qkey;
	check_ret("ud_to_init", ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
						      IBV_QP_PORT | IBV_QP_QKEY));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	check_ret("ud_to_rtr", ibv_modify_qp(qp, &a, IBV_QP_STATE));
	a.qp_state = IBV_QPS_RTS;
	check_ret("ud_to_rts", ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN));
}

#endif
