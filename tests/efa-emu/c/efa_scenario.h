/*
 * Test-only helpers shared by the scenario programs of tests/efa-emu/c
 * (on the emulated EFA device): finding efa_0, a datagram QP to RTS,
 * polling one completion or none, checking one. On top of the PASS/FAIL
 * protocol of tests/mlx5-emu/c/scenario.h. Everything is `static
 * inline`, so a program that uses only part of it still builds with
 * -Wall -Wextra -Werror.
 */
#ifndef EFA_EMU_SCENARIO_H
#define EFA_EMU_SCENARIO_H

#include <endian.h>

#include <infiniband/verbs.h>

#include "../../mlx5-emu/c/scenario.h"

/* The Q_Key every scenario's QPs use. */
#define EFA_QKEY 0x11111111u

/* efa_0 from the device list (kept in *list, to free at the end). */
static inline struct ibv_device *efa_device(const char *step, struct ibv_device ***list)
{
	int n = 0;

	*list = ibv_get_device_list(&n);
	for (int i = 0; *list && i < n; i++)
		if (!strcmp(ibv_get_device_name((*list)[i]), "efa_0"))
			return (*list)[i];
	fail(step, "no efa_0");
	return NULL;
}

/*
 * RESET -> INIT -> RTR -> RTS for a UD or SRD QP on port 1 (P_Key index
 * 0, EFA_QKEY, SQ PSN `sq_psn`), with RNR retry `rnr_retry` at RTS unless
 * it is negative.
 */
static inline void efa_to_rts(const char *step, struct ibv_qp *qp, uint32_t sq_psn,
			      int rnr_retry)
{
	struct ibv_qp_attr a;
	int mask;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qkey = EFA_QKEY;
	check_ret(step, ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
					     IBV_QP_PORT | IBV_QP_QKEY));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	check_ret(step, ibv_modify_qp(qp, &a, IBV_QP_STATE));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = sq_psn;
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (rnr_retry >= 0) {
		a.rnr_retry = rnr_retry;
		mask |= IBV_QP_RNR_RETRY;
	}
	check_ret(step, ibv_modify_qp(qp, &a, mask));
}

/* One completion from `cq` within 5 s, or the step fails. */
static inline struct ibv_wc efa_poll1(const char *step, struct ibv_cq *cq)
{
	struct ibv_wc wc;
	long end = now_ms() + 5000;

	for (;;) {
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			fail(step, "ibv_poll_cq failed");
		if (n == 1)
			return wc;
		if (now_ms() > end)
			fail(step, "no completion within 5 s");
	}
}

/* No completion on `cq` for 200 ms. */
static inline void efa_quiet(const char *step, struct ibv_cq *cq)
{
	struct ibv_wc wc;
	long end = now_ms() + 200;

	while (now_ms() < end)
		if (ibv_poll_cq(cq, 1, &wc) != 0)
			fail(step, "an unexpected completion");
}

/* Posts a receive of `n` buffers `sg` on `qp` for request `wr_id`. */
static inline void efa_post_recv(const char *step, struct ibv_qp *qp, struct ibv_sge *sg,
				 int n, uint64_t wr_id)
{
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = sg, .num_sge = n };
	struct ibv_recv_wr *bad;

	check_ret(step, ibv_post_recv(qp, &wr, &bad));
}

/*
 * Posts a signaled SEND of `n` buffers `sg` on `qp` for request `wr_id` to
 * QP `qpn` through `ah` presenting `qkey`, with send flags `flags` added,
 * and with immediate data `*imm` (host order) unless `imm` is NULL.
 */
static inline void efa_post_send(const char *step, struct ibv_qp *qp, struct ibv_ah *ah,
				 uint32_t qpn, uint32_t qkey, struct ibv_sge *sg, int n,
				 int flags, uint64_t wr_id, const uint32_t *imm)
{
	struct ibv_send_wr wr = {
		.wr_id = wr_id,
		.sg_list = sg,
		.num_sge = n,
		.opcode = imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED | flags,
		.imm_data = imm ? htobe32(*imm) : 0,
	};
	struct ibv_send_wr *bad;

	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = qpn;
	wr.wr.ud.remote_qkey = qkey;
	check_ret(step, ibv_post_send(qp, &wr, &bad));
}

/* `wc` has status `st` and belongs to request `id`. */
static inline void efa_wc_is(const char *step, struct ibv_wc wc, enum ibv_wc_status st,
			     uint64_t id)
{
	if (wc.status != st || wc.wr_id != id) {
		char why[192];
		snprintf(why, sizeof(why), "%s (vendor %u) of wr %llu, expected %s of %llu",
			 ibv_wc_status_str(wc.status), wc.vendor_err,
			 (unsigned long long)wc.wr_id, ibv_wc_status_str(st),
			 (unsigned long long)id);
		fail(step, why);
	}
}

#endif
