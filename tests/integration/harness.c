/* SPDX-License-Identifier: MIT */
/*
 * Integration-test harness (see harness.h). Everything the watchdog and the
 * signal handlers touch is async-signal-safe: they kill, unlink and write.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#ifndef COLLCD_PATH
#error "COLLCD_PATH must name the collcd binary"
#endif
#ifndef COLLC_ITEST_SCALE
#define COLLC_ITEST_SCALE 1
#endif

const char *h_name = "test";
uint64_t h_seed;
char h_sock[128];
pid_t h_daemon_pid;

static pid_t main_pid;
static unsigned watchdog_s;
static char tmpdir[64];
static char logpath[160];
static char admin_sock[160];
static int daemon_status = -1; /* waitpid status once collected */
static pid_t children[H_MAX_CHILDREN];
static int nchildren;

/* Output */

static void vline(const char *tag, const char *fmt, va_list ap)
{
	char buf[2048];
	int n = snprintf(buf, sizeof(buf), "[%s]%s%s ", h_name, tag[0] ? " " : "", tag);

	if (n < 0 || (size_t)n >= sizeof(buf))
		n = 0;
	vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
	/* One write per line: lines of several processes do not interleave. */
	n = (int)strlen(buf);
	if ((size_t)n + 1 < sizeof(buf))
		buf[n++] = '\n';
	fflush(stdout);
	if (write(STDOUT_FILENO, buf, (size_t)n) < 0) {
		/* nothing to do */
	}
}

void h_log(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vline("", fmt, ap);
	va_end(ap);
}

int h_fail(const char *fmt, ...)
{
	char tag[80];
	va_list ap;

	snprintf(tag, sizeof(tag), "FAIL (seed %#" PRIx64 ", pid %d):", h_seed, (int)getpid());
	va_start(ap, fmt);
	vline(tag, fmt, ap);
	va_end(ap);
	return 1;
}

static void sig_write(const char *s)
{
	if (write(STDOUT_FILENO, s, strlen(s)) < 0) {
		/* nothing to do */
	}
}

static void sig_write_hex(uint64_t v)
{
	char buf[19];
	int i = (int)sizeof(buf);

	buf[--i] = '\0';
	do {
		buf[--i] = "0123456789abcdef"[v & 15];
		v >>= 4;
	} while (v && i > 2);
	buf[--i] = 'x';
	buf[--i] = '0';
	sig_write(buf + i);
}

static void sig_write_num(long v)
{
	char buf[24];
	int i = (int)sizeof(buf);
	int neg = v < 0;
	unsigned long u = neg ? (unsigned long)-v : (unsigned long)v;

	buf[--i] = '\0';
	do {
		buf[--i] = (char)('0' + u % 10);
		u /= 10;
	} while (u && i > 1);
	if (neg)
		buf[--i] = '-';
	sig_write(buf + i);
}

/* Async-signal-safe: the last `lines` lines of collcd's log. */
static void log_tail_raw(int lines)
{
	static char buf[16384];
	ssize_t n;
	off_t end;
	int fd, seen = 0;
	char *p;

	if (!logpath[0])
		return;
	fd = open(logpath, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	end = lseek(fd, 0, SEEK_END);
	if (end < 0) {
		close(fd);
		return;
	}
	lseek(fd, end > (off_t)sizeof(buf) - 1 ? end - (off_t)sizeof(buf) + 1 : 0, SEEK_SET);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return;
	buf[n] = '\0';
	for (p = buf + n - 1; p > buf; p--)
		if (*p == '\n' && p != buf + n - 1 && ++seen >= lines) {
			p++;
			break;
		}
	sig_write("---- collcd log (tail) ----\n");
	sig_write(p);
	if (buf[n - 1] != '\n')
		sig_write("\n");
	sig_write("---- end of collcd log ----\n");
}

void h_daemon_log_tail(int lines)
{
	fflush(stdout);
	log_tail_raw(lines);
}

/* Cleanup */

/* Async-signal-safe: what collcd leaves behind when it dies (its admin socket sits next to the socket). */
static void cleanup_files(void)
{
	if (h_sock[0])
		unlink(h_sock);
	if (admin_sock[0])
		unlink(admin_sock);
	if (logpath[0] && !getenv("COLLC_TEST_KEEP"))
		unlink(logpath);
	if (tmpdir[0])
		rmdir(tmpdir);
}

static void kill_everything(void)
{
	for (int i = 0; i < nchildren; i++)
		if (children[i] > 0)
			kill(children[i], SIGKILL);
	if (h_daemon_pid > 0)
		kill(h_daemon_pid, SIGKILL);
}

static void at_exit(void)
{
	if (getpid() != main_pid)
		return;
	kill_everything();
	for (int i = 0; i < nchildren; i++)
		if (children[i] > 0)
			waitpid(children[i], NULL, 0);
	if (h_daemon_pid > 0)
		waitpid(h_daemon_pid, NULL, 0);
	h_daemon_pid = 0;
	cleanup_files();
}

/* Async-signal-safe: runs `collcctl status` against the hung daemon, 2 s at most. */
static void dump_status_raw(void)
{
#ifdef COLLCCTL_PATH
	pid_t p;

	if (h_daemon_pid <= 0 || !h_sock[0])
		return;
	sig_write("---- collcctl status at timeout ----\n");
	p = fork();
	if (p == 0) {
		const char *bin = getenv("COLLCCTL") ? getenv("COLLCCTL") : COLLCCTL_PATH;
		char *argv[] = { (char *)bin, (char *)"--socket", h_sock, (char *)"status", NULL };

		alarm(2);
		execv(bin, argv);
		_exit(127);
	}
	if (p > 0) {
		for (int i = 0; i < 300; i++) {
			struct timespec ts = { 0, 10000000 };

			if (waitpid(p, NULL, WNOHANG) == p)
				return;
			nanosleep(&ts, NULL);
		}
		kill(p, SIGKILL);
		waitpid(p, NULL, 0);
	}
#endif
}

static void on_alarm(int sig)
{
	(void)sig;
	if (getpid() != main_pid) {
		sig_write("[");
		sig_write(h_name);
		sig_write("] a rank process hit its watchdog\n");
		_exit(124);
	}
	sig_write("[");
	sig_write(h_name);
	sig_write("] FAIL: TIMEOUT: watchdog fired after ");
	sig_write_num((long)watchdog_s);
	sig_write(" s (seed ");
	sig_write_hex(h_seed);
	sig_write("); processes still running:");
	for (int i = 0; i < nchildren; i++)
		if (children[i] > 0 && waitpid(children[i], NULL, WNOHANG) == 0) {
			sig_write(" ");
			sig_write_num((long)children[i]);
		}
	sig_write("\n");
	dump_status_raw();
	log_tail_raw(40);
	kill_everything();
	cleanup_files();
	_exit(1);
}

static void on_term(int sig)
{
	if (getpid() != main_pid)
		_exit(128 + sig);
	sig_write("[");
	sig_write(h_name);
	sig_write("] killed by a signal: cleaning up\n");
	kill_everything();
	cleanup_files();
	_exit(128 + sig);
}

void h_init(const char *name, int argc, char **argv, unsigned timeout_s)
{
	const char *env = getenv("COLLC_TEST_SEED");
	struct sigaction sa = { 0 };

	h_name = name;
	main_pid = getpid();
	setvbuf(stdout, NULL, _IOLBF, 0);
	h_seed = 0x636f6c6c63ull; /* "collc" */
	for (const char *p = name; *p; p++)
		h_seed = h_mix(h_seed ^ (uint64_t)(unsigned char)*p);
	if (env && *env)
		h_seed = strtoull(env, NULL, 0);
	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], "--seed") == 0)
			h_seed = strtoull(argv[i + 1], NULL, 0);
	sigemptyset(&sa.sa_mask);
	sa.sa_handler = on_alarm;
	sigaction(SIGALRM, &sa, NULL);
	sa.sa_handler = on_term;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	atexit(at_exit);
	/* Sanitizer builds are slower; COLLC_TEST_TIMEOUT_SCALE=N stretches a slow machine's. */
	timeout_s *= COLLC_ITEST_SCALE;
	if (getenv("COLLC_TEST_TIMEOUT_SCALE") && atoi(getenv("COLLC_TEST_TIMEOUT_SCALE")) > 0)
		timeout_s *= (unsigned)atoi(getenv("COLLC_TEST_TIMEOUT_SCALE"));
	watchdog_s = timeout_s;
	alarm(timeout_s);
	h_log("seed %#" PRIx64 " (replay: COLLC_TEST_SEED=%#" PRIx64 "), watchdog %u s", h_seed,
	      h_seed, timeout_s);
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	char tag[80];
	va_list ap;

	snprintf(tag, sizeof(tag), "FAIL (seed %#" PRIx64 "):", h_seed);
	va_start(ap, fmt);
	vline(tag, fmt, ap);
	va_end(ap);
	h_daemon_log_tail(40);
	exit(1);
}

void h_skip(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vline("SKIP:", fmt, ap);
	va_end(ap);
	if (getpid() != main_pid) {
		fflush(NULL);
		_exit(H_SKIP);
	}
	exit(H_SKIP);
}

/* The daemon */

static int daemon_reaped(void)
{
	int st;

	if (h_daemon_pid <= 0)
		return 1;
	if (waitpid(h_daemon_pid, &st, WNOHANG) == h_daemon_pid) {
		daemon_status = st;
		h_daemon_pid = 0;
		return 1;
	}
	return 0;
}

int h_daemon_alive(void)
{
	return !daemon_reaped();
}

static void describe_status(int st, char *out, size_t len)
{
	if (WIFEXITED(st))
		snprintf(out, len, "exited with status %d", WEXITSTATUS(st));
	else if (WIFSIGNALED(st))
		snprintf(out, len, "killed by signal %d (%s)%s", WTERMSIG(st), strsignal(WTERMSIG(st)),
			 WCOREDUMP(st) ? ", core dumped" : "");
	else
		snprintf(out, len, "status %#x", st);
}

void h_daemon_start(const char *const *extra_args)
{
	const char *bin = getenv("COLLCD") ? getenv("COLLCD") : COLLCD_PATH;
	const char *argv[64];
	int argc = 0, logfd;
	uint64_t t0;
	pid_t pid;

	if (access(bin, X_OK) < 0)
		h_skip("collcd binary %s is not executable: %s", bin, strerror(errno));
	if (!tmpdir[0]) {
		snprintf(tmpdir, sizeof(tmpdir), "/tmp/collc-itest-XXXXXX");
		if (!mkdtemp(tmpdir)) {
			tmpdir[0] = '\0';
			die("mkdtemp: %s", strerror(errno));
		}
		snprintf(h_sock, sizeof(h_sock), "%s/collcd.sock", tmpdir);
		snprintf(admin_sock, sizeof(admin_sock), "%s.admin", h_sock);
		snprintf(logpath, sizeof(logpath), "%s/collcd.log", tmpdir);
	}
	logfd = open(logpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (logfd < 0)
		die("%s: %s", logpath, strerror(errno));
	argv[argc++] = bin;
	argv[argc++] = "--socket";
	argv[argc++] = h_sock;
	argv[argc++] = "--foreground";
	if (getenv("COLLC_TEST_DEBUG")) {
		argv[argc++] = "--log-level";
		argv[argc++] = "debug";
	}
	for (int i = 0; extra_args && extra_args[i] && argc < 62; i++)
		argv[argc++] = extra_args[i];
	/* COLLC_TEST_DAEMON_ARGS: more collcd arguments for every test, split at spaces. */
	if (getenv("COLLC_TEST_DAEMON_ARGS")) {
		char *copy = strdup(getenv("COLLC_TEST_DAEMON_ARGS")), *save = NULL;

		for (char *w = strtok_r(copy, " ", &save); w && argc < 62; w = strtok_r(NULL, " ", &save))
			argv[argc++] = w;
	}
	argv[argc] = NULL;
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		signal(SIGTERM, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
		signal(SIGALRM, SIG_DFL);
		signal(SIGPIPE, SIG_DFL);
		/* collcd dies with the test, whatever kills the test. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != main_pid)
			_exit(127);
		dup2(logfd, STDOUT_FILENO);
		dup2(logfd, STDERR_FILENO);
		execv(bin, (char *const *)argv);
		dprintf(STDERR_FILENO, "exec %s: %s\n", bin, strerror(errno));
		_exit(127);
	}
	close(logfd);
	h_daemon_pid = pid;
	daemon_status = -1;
	t0 = h_now_ns();
	for (;;) {
		struct collc_ctx *ctx;
		char why[128];
		int r;

		if (daemon_reaped()) {
			describe_status(daemon_status, why, sizeof(why));
			die("collcd %s before it accepted connections", why);
		}
		r = collc_connect(h_sock, &ctx);
		if (r == 0) {
			collc_disconnect(ctx);
			break;
		}
		if (h_now_ns() - t0 > 10000000000ull)
			die("collcd did not accept connections on %s within 10 s: %s", h_sock,
			    collc_strerror(r));
		usleep(5000);
	}
	h_log("collcd pid %d serving %s (%.1f ms to start)", (int)pid, h_sock,
	      (double)(h_now_ns() - t0) / 1e6);
}

void h_daemon_kill(int sig)
{
	if (h_daemon_pid <= 0)
		return;
	kill(h_daemon_pid, sig);
	waitpid(h_daemon_pid, NULL, 0);
	h_daemon_pid = 0;
	daemon_status = -1;
}

int h_daemon_stop(void)
{
	char why[128];
	int crashed = 0, st = 0;

	if (h_daemon_pid <= 0 && daemon_status == -1)
		return 0;
	if (daemon_reaped() && daemon_status != -1) {
		describe_status(daemon_status, why, sizeof(why));
		h_fail("collcd died during the test: %s", why);
		daemon_status = -1;
		return -1;
	}
	kill(h_daemon_pid, SIGTERM);
	for (int i = 0; i < 500; i++) {
		if (waitpid(h_daemon_pid, &st, WNOHANG) == h_daemon_pid)
			goto reaped;
		usleep(10000);
	}
	h_fail("collcd did not exit within 5 s of SIGTERM: killing it");
	kill(h_daemon_pid, SIGKILL);
	waitpid(h_daemon_pid, &st, 0);
	crashed = 1;
reaped:
	h_daemon_pid = 0;
	daemon_status = -1;
	if (!crashed && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
		describe_status(st, why, sizeof(why));
		h_fail("collcd %s after SIGTERM (want a clean exit 0)", why);
		crashed = 1;
	}
	return crashed ? -1 : 0;
}

int h_finish(int failed)
{
	int dfail = h_daemon_stop() < 0;

	if (failed || dfail) {
		h_log("FAILED (seed %#" PRIx64 "; replay with COLLC_TEST_SEED=%#" PRIx64 ")", h_seed,
		      h_seed);
		h_daemon_log_tail(40);
		return 1;
	}
	h_log("PASS");
	return 0;
}

/* Processes */

static void track(pid_t pid)
{
	if (nchildren < H_MAX_CHILDREN)
		children[nchildren++] = pid;
}

static void untrack(pid_t pid)
{
	for (int i = 0; i < nchildren; i++)
		if (children[i] == pid)
			children[i] = 0;
}

pid_t h_spawn(h_rank_fn fn, int rank, int nranks, void *arg)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		int r;

		signal(SIGTERM, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != main_pid)
			_exit(127);
		nchildren = 0;
		/* A rank that hangs ends itself a little after the parent's watchdog would. */
		alarm(watchdog_s + 2);
		r = fn(rank, nranks, arg);
		fflush(NULL);
		_exit(r & 0xff);
	}
	track(pid);
	return pid;
}

int h_reap(const pid_t *pids, int n, int *status, int grace_ms)
{
	int left = n, failed = 0, done[H_MAX_CHILDREN] = { 0 };
	uint64_t deadline = 0;

	while (left > 0) {
		int progress = 0;

		for (int i = 0; i < n; i++) {
			int st;

			if (done[i] || waitpid(pids[i], &st, WNOHANG) != pids[i])
				continue;
			done[i] = 1;
			left--;
			progress = 1;
			untrack(pids[i]);
			if (status)
				status[i] = st;
			if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
				char why[128];

				describe_status(st, why, sizeof(why));
				if (!status)
					h_log("process %d (pid %d) %s", i, (int)pids[i], why);
				failed++;
				if (!deadline)
					deadline = h_now_ns() + (uint64_t)grace_ms * 1000000ull;
			}
		}
		if (deadline && left > 0 && h_now_ns() > deadline) {
			for (int i = 0; i < n; i++)
				if (!done[i]) {
					h_log("process %d (pid %d) still runs %d ms after another failed: killing it",
					      i, (int)pids[i], grace_ms);
					kill(pids[i], SIGKILL);
				}
			deadline = UINT64_MAX;
		}
		if (!progress)
			usleep(2000);
	}
	return failed;
}

int h_run_ranks(int nranks, h_rank_fn fn, void *arg)
{
	pid_t pids[H_MAX_CHILDREN];

	if (nranks > H_MAX_CHILDREN)
		die("too many ranks: %d", nranks);
	for (int r = 0; r < nranks; r++)
		pids[r] = h_spawn(fn, r, nranks, arg);
	return h_reap(pids, nranks, NULL, 3000);
}

/* Ranks */

void h_unique_id(struct collc_unique_id *id)
{
	struct collc_ctx *ctx;
	int r = collc_connect(h_sock, &ctx);

	if (r < 0)
		die("collc_connect(%s): %s", h_sock, collc_strerror(r));
	r = collc_get_unique_id(ctx, id);
	collc_disconnect(ctx);
	if (r < 0)
		die("collc_get_unique_id: %s", collc_strerror(r));
}

int h_join(const struct collc_unique_id *id, int nranks, int rank, struct collc_ctx **ret_ctx,
	   struct collc_comm **ret_comm)
{
	struct collc_ctx *ctx;
	int r = collc_connect(h_sock, &ctx);

	if (r < 0) {
		h_fail("rank %d: collc_connect: %s", rank, collc_strerror(r));
		return r;
	}
	r = collc_comm_init(ctx, id, nranks, rank, -1, ret_comm);
	if (r < 0) {
		h_fail("rank %d/%d: collc_comm_init: %s", rank, nranks, collc_strerror(r));
		collc_disconnect(ctx);
		return r;
	}
	*ret_ctx = ctx;
	return 0;
}

void *h_shared(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		die("mmap %zu shared bytes: %s", bytes, strerror(errno));
	return p;
}

void h_barrier_init(struct h_barrier *b, uint32_t n)
{
	b->n = n;
	b->count = 0;
	b->gen = 0;
}

int h_barrier_wait(struct h_barrier *b, int timeout_ms)
{
	uint32_t gen = __atomic_load_n(&b->gen, __ATOMIC_ACQUIRE);
	uint64_t t0 = h_now_ns();

	if (__atomic_add_fetch(&b->count, 1, __ATOMIC_ACQ_REL) == b->n) {
		/* count is zero before gen moves: whoever sees the new gen sees it zeroed */
		__atomic_store_n(&b->count, 0, __ATOMIC_RELAXED);
		__atomic_add_fetch(&b->gen, 1, __ATOMIC_RELEASE);
		syscall(SYS_futex, &b->gen, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
		return 0;
	}
	while (__atomic_load_n(&b->gen, __ATOMIC_ACQUIRE) == gen) {
		struct timespec ts = { 0, 1000000 };

		if (timeout_ms >= 0 && h_now_ns() - t0 > (uint64_t)timeout_ms * 1000000ull)
			return -ETIMEDOUT;
		syscall(SYS_futex, &b->gen, FUTEX_WAIT, gen, &ts, NULL, 0);
	}
	return 0;
}

/* Time and randomness */

uint64_t h_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t h_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

uint64_t h_rand(uint64_t *state)
{
	*state += 0x9e3779b97f4a7c15ull;
	return h_mix(*state);
}

uint64_t h_rand_below(uint64_t *state, uint64_t n)
{
	return n ? h_rand(state) % n : 0;
}

const char *h_collcctl(void)
{
	return getenv("COLLCCTL") ? getenv("COLLCCTL") : COLLCCTL_PATH;
}

int h_run_capture(const char *cmd, char *out, size_t outlen)
{
	int pfd[2], st;
	size_t got = 0;
	uint64_t t0 = h_now_ns();
	pid_t pid;

	if (outlen == 0 || pipe2(pfd, O_CLOEXEC) < 0)
		return -1;
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		close(pfd[0]);
		close(pfd[1]);
		return -1;
	}
	if (pid == 0) {
		signal(SIGTERM, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		signal(SIGPIPE, SIG_DFL);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(pfd[1], STDOUT_FILENO);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	track(pid);
	close(pfd[1]);
	for (;;) {
		struct pollfd p = { .fd = pfd[0], .events = POLLIN };
		ssize_t n;

		if (h_now_ns() - t0 > 10000000000ull) {
			h_log("command ran past 10 s, killing it: %s", cmd);
			kill(pid, SIGKILL);
			break;
		}
		if (poll(&p, 1, 100) <= 0)
			continue;
		if (got + 1 < outlen) {
			n = read(pfd[0], out + got, outlen - 1 - got);
		} else {
			char sink[4096];

			n = read(pfd[0], sink, sizeof(sink));
		}
		if (n <= 0)
			break;
		if (got + 1 < outlen)
			got += (size_t)n;
	}
	out[got] = '\0';
	close(pfd[0]);
	waitpid(pid, &st, 0);
	untrack(pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
