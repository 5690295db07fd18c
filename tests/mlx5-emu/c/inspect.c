/*
 * `rverbs inspect --pid` on a process on rdma-core's libmlx5: its queues
 * are memory libmlx5 allocated, which neither the kernel nor the process
 * describes anywhere a tool can read (libmlx5 keeps no queue directory),
 * so the tool must say plainly that it cannot inspect them, and why.
 *
 * This program creates a CQ, an RC QP and an SRQ and posts receives, then
 * runs the tool on itself (`$RVERBS_CLI`, without the emulator preloaded:
 * an outside tool) while it waits for it, paused, and checks the tool's
 * text and JSON answers name the reason.
 *
 * Run on our libibverbs.so.1 instead (`SCENARIO_OUR_LIBIBVERBS` set, as
 * `cargo xtask mlx5` does for that run), the queues are rverbs' mlx5
 * provider's, listed in its queue directory: the tool must then find all
 * four (CQ, SRQ holding the one posted receive, RQ, SQ) in both forms.
 */
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "scenario.h"

extern char **environ;

/* Runs `$RVERBS_CLI inspect --pid <self> [flag]` and collects its output
 * (stdout and stderr) into out; returns its exit status (-1 if it did not
 * exit). */
static int run_tool(const char *cli, const char *flag, char *out, size_t cap)
{
	char pid[32], *argv[6], *envp[512];
	int p[2], st, n = 0, a = 0;
	size_t len = 0;
	ssize_t r;
	pid_t c;
	char **e;

	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	for (e = environ; *e && n < 511; e++)
		if (strncmp(*e, "LD_PRELOAD=", 11))
			envp[n++] = *e;
	envp[n] = NULL;
	argv[a++] = (char *)cli;
	argv[a++] = "inspect";
	argv[a++] = "--pid";
	argv[a++] = pid;
	if (flag)
		argv[a++] = (char *)flag;
	argv[a] = NULL;
	if (pipe(p))
		fail("run_tool", strerror(errno));
	c = fork();
	if (c < 0)
		fail("run_tool", strerror(errno));
	if (c == 0) {
		dup2(p[1], 1);
		dup2(p[1], 2);
		close(p[0]);
		close(p[1]);
		execve(cli, argv, envp);
		_exit(127);
	}
	close(p[1]);
	while (len + 1 < cap && (r = read(p[0], out + len, cap - 1 - len)) > 0)
		len += (size_t)r;
	out[len] = 0;
	close(p[0]);
	if (waitpid(c, &st, 0) != c)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int main(void)
{
	static char out[1 << 16];
	struct ibv_device **list, *dev = NULL;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_srq *srq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	struct ibv_qp_init_attr qinit;
	struct ibv_srq_init_attr sinit;
	struct ibv_recv_wr wr, *bad;
	struct ibv_sge sge;
	const char *cli = getenv("RVERBS_CLI");
	static char buf[4096];
	int n, i, st;

	list = ibv_get_device_list(&n);
	for (i = 0; list && i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), "mlx5_0"))
			dev = list[i];
	if (!dev)
		fail("objects", "no mlx5_0");
	ctx = check_ptr("objects", ibv_open_device(dev));
	pd = check_ptr("objects", ibv_alloc_pd(ctx));
	mr = check_ptr("objects", ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE));
	cq = check_ptr("objects", ibv_create_cq(ctx, 16, NULL, NULL, 0));
	memset(&sinit, 0, sizeof(sinit));
	sinit.attr.max_wr = 8;
	sinit.attr.max_sge = 1;
	srq = check_ptr("objects", ibv_create_srq(pd, &sinit));
	memset(&qinit, 0, sizeof(qinit));
	qinit.send_cq = cq;
	qinit.recv_cq = cq;
	qinit.qp_type = IBV_QPT_RC;
	qinit.cap.max_send_wr = 8;
	qinit.cap.max_recv_wr = 8;
	qinit.cap.max_send_sge = 1;
	qinit.cap.max_recv_sge = 1;
	qp = check_ptr("objects", ibv_create_qp(pd, &qinit));
	sge.addr = (uintptr_t)buf;
	sge.length = 256;
	sge.lkey = mr->lkey;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 7;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	check_ret("objects", ibv_post_srq_recv(srq, &wr, &bad));
	pass("objects");

	if (!cli)
		fail("inspect_text", "RVERBS_CLI is not set (cargo xtask mlx5 sets it)");
	/* Where the Yama LSM limits ptrace to descendants, let the tool (our
	 * child) read us; elsewhere this fails harmlessly. */
	(void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);

	if (getenv("SCENARIO_OUR_LIBIBVERBS")) {
		st = run_tool(cli, NULL, out, sizeof(out));
		expect("inspect_text", st == 0, out);
		expect("inspect_text", strstr(out, ": 4 mlx5 queues") != NULL, out);
		expect("inspect_text", strstr(out, "RVERBS_MLX5_QUEUE_DIR_V") != NULL, out);
		expect("inspect_text", strstr(out, "libibverbs.so.1: 4 of ") != NULL, out);
		expect("inspect_text", strstr(out, "\n  CQ ") && strstr(out, "\n  SRQ ") &&
		       strstr(out, "\n  RQ ") && strstr(out, "\n  SQ "), out);
		pass("inspect_text");

		st = run_tool(cli, "--json", out, sizeof(out));
		expect("inspect_json", st == 0, out);
		expect("inspect_json", strstr(out, "\"queues\": []") == NULL, out);
		expect("inspect_json", strstr(out, "\"kind\": \"SRQ\"") != NULL, out);
		expect("inspect_json", strstr(out, "cannot be inspected") == NULL, out);
		pass("inspect_json");
		goto destroy;
	}

	st = run_tool(cli, NULL, out, sizeof(out));
	expect("inspect_text", st == 0, out);
	expect("inspect_text", strstr(out, "mlx5 queues cannot be inspected") != NULL, out);
	expect("inspect_text", strstr(out, "rdma-core's libmlx5") != NULL, out);
	expect("inspect_text", strstr(out, "RVERBS_MLX5_QUEUE_DIR_V") != NULL, out);
	pass("inspect_text");

	st = run_tool(cli, "--json", out, sizeof(out));
	expect("inspect_json", st == 0, out);
	expect("inspect_json", strstr(out, "\"directories\": []") != NULL, out);
	expect("inspect_json", strstr(out, "\"queues\": []") != NULL, out);
	expect("inspect_json", strstr(out, "mlx5 queues cannot be inspected") != NULL, out);
	pass("inspect_json");

destroy:
	check_ret("destroy", ibv_destroy_qp(qp));
	check_ret("destroy", ibv_destroy_srq(srq));
	check_ret("destroy", ibv_destroy_cq(cq));
	check_ret("destroy", ibv_dereg_mr(mr));
	check_ret("destroy", ibv_dealloc_pd(pd));
	check_ret("destroy", ibv_close_device(ctx));
	ibv_free_device_list(list);
	pass("destroy");
	return 0;
}
