/* SPDX-License-Identifier: MIT */
/*
 * Test harness (see harness.h). Everything the watchdog and the signal
 * handlers touch is async-signal-safe: they kill, unlink and write.
 */
#define _GNU_SOURCE
#include <dirent.h>
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
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "json.h"
#include "refcheck.h"
#include "common/scm.h"
#include "proto/wire.h"

#ifndef COLLCD_PATH
#error "COLLCD_PATH must name the collcd binary"
#endif
#ifndef COLLCCTL_PATH
#error "COLLCCTL_PATH must name the collcctl binary"
#endif
#ifndef COLLC_ITEST_SCALE
#define COLLC_ITEST_SCALE 1
#endif

/* GCC names the sanitizers with macros, clang through __has_feature. */
#ifdef __has_feature
#define HAS_FEATURE(x) __has_feature(x)
#else
#define HAS_FEATURE(x) 0
#endif
#if defined(__SANITIZE_ADDRESS__) || HAS_FEATURE(address_sanitizer)
#define UNDER_ASAN 1
#else
#define UNDER_ASAN 0
#endif
#if defined(__SANITIZE_THREAD__) || HAS_FEATURE(thread_sanitizer)
#define UNDER_TSAN 1
#else
#define UNDER_TSAN 0
#endif

/*
 * collcd's exit after SIGTERM under a sanitizer: 64 devices' channel threads,
 * their memory and the leak check took 1.8-4.2 s beside another test on two
 * cores, and over 5 s once in CI. Read from the sanitizer macros as well as
 * from COLLC_ITEST_SCALE, which only the integration suite sets.
 */
#if UNDER_ASAN || UNDER_TSAN || COLLC_ITEST_SCALE > 1
#define STOP_SCALE 4
#else
#define STOP_SCALE 1
#endif

const char *h_name = "test";
uint64_t h_seed;
char h_sock[128];
pid_t h_daemon_pid;
unsigned h_watchdog_s;
long h_daemon_nofile;

static const struct h_suite integration_suite = {
	.tmpdir = "/tmp/collc-itest-XXXXXX",
	.start_ms = 10000,
	.stop_ms = 5000 * STOP_SCALE,
	.command_ms = 10000,
	.connect_tries = 1,
	.stop_checks_log = 0,
};

static struct h_suite suite = integration_suite;
static pid_t main_pid;
static char tmpdir[64];
static char logpath[160];
static char admin_sock[160];
static int daemon_status = -1; /* waitpid status once collected */
static pid_t children[H_MAX_CHILDREN];
static int nchildren;

/* Output */

static void vline(const char *tag, const char *fmt, va_list ap)
{
	char buf[4096];
	int n = snprintf(buf, sizeof(buf), "[%s]%s%s ", h_name, tag[0] ? " " : "", tag);

	if (n < 0 || (size_t)n >= sizeof(buf))
		n = 0;
	vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
	n = (int)strlen(buf);
	if ((size_t)n + 1 < sizeof(buf))
		buf[n++] = '\n';
	fflush(stdout);
	/* One write per line: the lines of several processes do not interleave. */
	if (write(STDOUT_FILENO, buf, (size_t)n) < 0) {
		/* nowhere to report it */
	}
}

static void vfail(const char *fmt, va_list ap)
{
	char tag[96];

	snprintf(tag, sizeof(tag), "FAIL (seed %#" PRIx64 ", pid %d):", h_seed, (int)getpid());
	vline(tag, fmt, ap);
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
	va_list ap;

	va_start(ap, fmt);
	vfail(fmt, ap);
	va_end(ap);
	return 1;
}

static void sig_write(const char *s)
{
	if (write(STDOUT_FILENO, s, strlen(s)) < 0) {
		/* nowhere to report it */
	}
}

static void sig_write_num(uint64_t v, int hex)
{
	char buf[24];
	int i = (int)sizeof(buf);

	buf[--i] = '\0';
	do {
		buf[--i] = "0123456789abcdef"[hex ? v & 15 : v % 10];
		v = hex ? v >> 4 : v / 10;
	} while (v && i > 2);
	if (hex) {
		buf[--i] = 'x';
		buf[--i] = '0';
	}
	sig_write(buf + i);
}

/* Async-signal-safe: the last `lines` lines of collcd's log. */
static void log_tail_raw(int lines)
{
	static char buf[24576];
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
	if (end <= 0) {
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
		if (children[i] > 0) {
			kill(children[i], SIGCONT);
			kill(children[i], SIGKILL);
		}
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
}

static void on_alarm(int sig)
{
	(void)sig;
	if (getpid() != main_pid) {
		sig_write("[");
		sig_write(h_name);
		sig_write("] a child process hit its watchdog (pid ");
		sig_write_num((uint64_t)getpid(), 0);
		sig_write(")\n");
		_exit(124);
	}
	sig_write("[");
	sig_write(h_name);
	sig_write("] FAIL: TIMEOUT: watchdog fired after ");
	sig_write_num(h_watchdog_s, 0);
	sig_write(" s (seed ");
	sig_write_num(h_seed, 1);
	sig_write("; replay with COLLC_TEST_SEED=");
	sig_write_num(h_seed, 1);
	sig_write("); processes still running:");
	for (int i = 0; i < nchildren; i++)
		if (children[i] > 0 && waitpid(children[i], NULL, WNOHANG) == 0) {
			sig_write(" ");
			sig_write_num((uint64_t)children[i], 0);
		}
	sig_write("\n");
	dump_status_raw();
	log_tail_raw(60);
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

int h_sanitized(void)
{
	return UNDER_ASAN || UNDER_TSAN;
}

int h_tsan(void)
{
	return UNDER_TSAN;
}

/* The reference checker's lines, as this test's FAIL and log lines. */
static void report_check(int fail, const char *line)
{
	if (fail)
		h_fail("%s", line);
	else
		h_log("%s", line);
}

void h_init_suite(const struct h_suite *s, const char *name, int argc, char **argv,
		  unsigned watchdog_s)
{
	const char *env = getenv("COLLC_TEST_SEED");
	struct sigaction sa = { 0 };

	suite = *s;
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
	rc_set_report(report_check);
	h_watchdog_s = watchdog_s;
	alarm(watchdog_s);
	h_log("seed %#" PRIx64 " (replay: COLLC_TEST_SEED=%#" PRIx64 "), watchdog %u s%s", h_seed,
	      h_seed, watchdog_s, h_sanitized() ? ", sanitizer build" : "");
	snprintf(tmpdir, sizeof(tmpdir), "%s", suite.tmpdir);
	if (!mkdtemp(tmpdir)) {
		tmpdir[0] = '\0';
		h_die("mkdtemp: %s", strerror(errno));
	}
	snprintf(h_sock, sizeof(h_sock), "%s/collcd.sock", tmpdir);
	snprintf(admin_sock, sizeof(admin_sock), "%s.admin", h_sock);
	snprintf(logpath, sizeof(logpath), "%s/collcd.log", tmpdir);
}

void h_init(const char *name, int argc, char **argv, unsigned timeout_s)
{
	const char *scale = getenv("COLLC_TEST_TIMEOUT_SCALE");

	/* Sanitizer builds are slower; COLLC_TEST_TIMEOUT_SCALE=N stretches a slow machine's. */
	timeout_s *= COLLC_ITEST_SCALE;
	if (scale && atoi(scale) > 0)
		timeout_s *= (unsigned)atoi(scale);
	h_init_suite(&integration_suite, name, argc, argv, timeout_s);
}

void h_die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfail(fmt, ap);
	va_end(ap);
	if (getpid() != main_pid) {
		fflush(NULL);
		_exit(1);
	}
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

int h_reap_all_ok(const pid_t *pids, int n, int timeout_ms, const char *what)
{
	int failed = 0;

	for (int i = 0; i < n; i++) {
		char name[96];

		snprintf(name, sizeof(name), "%s %d", what, i);
		failed |= h_reap_one_ok(pids[i], timeout_ms, name);
	}
	return failed;
}

void h_describe_status(int st, char *out, size_t len)
{
	if (WIFEXITED(st))
		snprintf(out, len, "exited with status %d%s", WEXITSTATUS(st),
			 WEXITSTATUS(st) == 124 ? " (its watchdog fired)" : "");
	else if (WIFSIGNALED(st))
		snprintf(out, len, "killed by signal %d (%s)%s", WTERMSIG(st),
			 strsignal(WTERMSIG(st)), WCOREDUMP(st) ? ", core dumped" : "");
	else
		snprintf(out, len, "status %#x", st);
}

/* The child half of h_daemon_start: never returns. */
static void exec_daemon(const char *bin, const char **argv, int logfd)
{
	signal(SIGTERM, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	signal(SIGALRM, SIG_DFL);
	signal(SIGPIPE, SIG_DFL);
	alarm(0);
	/* collcd dies with the test, whatever kills the test. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != main_pid)
		_exit(127);
	if (h_daemon_nofile > 0) {
		struct rlimit rl;

		getrlimit(RLIMIT_NOFILE, &rl);
		rl.rlim_cur = (rlim_t)h_daemon_nofile;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	dup2(logfd, STDOUT_FILENO);
	dup2(logfd, STDERR_FILENO);
	execv(bin, (char *const *)argv);
	dprintf(STDERR_FILENO, "exec %s: %s\n", bin, strerror(errno));
	_exit(127);
}

void h_daemon_start(const char *const *extra_args)
{
	const char *bin = getenv("COLLCD") ? getenv("COLLCD") : COLLCD_PATH;
	const char *more = getenv("COLLC_TEST_DAEMON_ARGS");
	char *words = more ? strdup(more) : NULL, *save = NULL;
	const char *argv[64];
	int argc = 0, logfd;
	uint64_t t0;
	pid_t pid;

	if (access(bin, X_OK) < 0)
		h_skip("collcd binary %s is not executable: %s", bin, strerror(errno));
	logfd = open(logpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (logfd < 0)
		h_die("%s: %s", logpath, strerror(errno));
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
	for (char *w = words ? strtok_r(words, " ", &save) : NULL; w && argc < 62;
	     w = strtok_r(NULL, " ", &save))
		argv[argc++] = w;
	argv[argc] = NULL;
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		h_die("fork: %s", strerror(errno));
	if (pid == 0)
		exec_daemon(bin, argv, logfd);
	close(logfd);
	free(words);
	h_daemon_pid = pid;
	daemon_status = -1;
	t0 = h_now_ns();
	for (;;) {
		struct collc_ctx *ctx;
		char why[128];
		int r;

		if (daemon_reaped()) {
			h_describe_status(daemon_status, why, sizeof(why));
			h_die("collcd %s before it accepted connections", why);
		}
		r = collc_connect(h_sock, &ctx);
		if (r == 0) {
			collc_disconnect(ctx);
			break;
		}
		if (h_now_ns() - t0 > (uint64_t)suite.start_ms * 1000000ull)
			h_die("collcd did not accept connections on %s within %d s: %s", h_sock,
			      suite.start_ms / 1000, collc_strerror(r));
		h_sleep_us(5000);
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

int h_daemon_log_has_report(void)
{
	static const char *const pats[] = {
		"ERROR: AddressSanitizer",  "ERROR: LeakSanitizer",
		"WARNING: ThreadSanitizer", "ThreadSanitizer: ",
		"runtime error: ",          "SUMMARY: UndefinedBehaviorSanitizer"
	};
	FILE *f = fopen(logpath, "re");
	char line[1024];
	int found = 0;

	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f))
		for (size_t i = 0; i < sizeof(pats) / sizeof(pats[0]); i++)
			if (strstr(line, pats[i])) {
				found = 1;
				break;
			}
	fclose(f);
	return found;
}

/*
 * Where collcd's threads stand when it does not exit: each thread's name,
 * state and kernel wait channel from /proc, then every stack through gdb
 * where gdb is installed (scripts/install-deps.sh installs it for the tests).
 */
static void dump_daemon_threads(pid_t pid)
{
	char path[64], line[256], cmd[128];
	struct dirent *de;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return;
	fprintf(stderr, "---- collcd threads (name, state, wait channel) ----\n");
	while ((de = readdir(d))) {
		char comm[32] = "?", state = '?', wchan[64] = "?";
		FILE *f;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.16s/stat", (int)pid, de->d_name);
		f = fopen(path, "r");
		if (f) {
			if (fgets(line, sizeof(line), f)) {
				char *l = strchr(line, '('), *r = strrchr(line, ')');

				if (l && r && r > l && r[1] == ' ') {
					snprintf(comm, sizeof(comm), "%.*s", (int)(r - l - 1),
						 l + 1);
					state = r[2];
				}
			}
			fclose(f);
		}
		snprintf(path, sizeof(path), "/proc/%d/task/%.16s/wchan", (int)pid, de->d_name);
		f = fopen(path, "r");
		if (f) {
			if (!fgets(wchan, sizeof(wchan), f))
				snprintf(wchan, sizeof(wchan), "?");
			fclose(f);
		}
		fprintf(stderr, "  %s %s %c %s\n", de->d_name, comm, state, wchan);
	}
	closedir(d);
	if (access("/usr/bin/gdb", X_OK) == 0) {
		fprintf(stderr, "---- collcd stacks (gdb) ----\n");
		snprintf(cmd, sizeof(cmd),
			 "timeout 60 /usr/bin/gdb -q -batch -p %d -ex 'thread apply all bt' "
			 "</dev/null 2>&1 | grep -E '^(Thread|#)' >&2",
			 (int)pid);
		if (system(cmd) != 0)
			fprintf(stderr, "(gdb gave no stacks)\n");
	}
}

int h_daemon_stop(void)
{
	char why[128];
	int st = 0, bad = 0;

	if (h_daemon_pid <= 0 && daemon_status == -1)
		return 0;
	if (daemon_reaped() && daemon_status != -1) {
		h_describe_status(daemon_status, why, sizeof(why));
		h_fail("collcd died during the test: %s", why);
		daemon_status = -1;
		return -1;
	}
	kill(h_daemon_pid, SIGTERM);
	for (int waited = 0; waited < suite.stop_ms; waited += 10) {
		if (waitpid(h_daemon_pid, &st, WNOHANG) == h_daemon_pid)
			goto reaped;
		h_sleep_us(10000);
	}
	h_fail("collcd did not exit within %d s of SIGTERM: killing it", suite.stop_ms / 1000);
	dump_daemon_threads(h_daemon_pid);
	kill(h_daemon_pid, SIGKILL);
	waitpid(h_daemon_pid, &st, 0);
	bad = 1;
reaped:
	h_daemon_pid = 0;
	daemon_status = -1;
	if (!bad && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
		h_describe_status(st, why, sizeof(why));
		h_fail("collcd %s after SIGTERM (want a clean exit 0: a sanitizer or leak report?)",
		       why);
		bad = 1;
	}
	if (suite.stop_checks_log && h_daemon_log_has_report()) {
		h_fail("collcd's log holds a sanitizer report");
		bad = 1;
	}
	return bad ? -1 : 0;
}

int h_finish(int failed)
{
	int dfail = h_daemon_stop() < 0;

	if (failed || dfail) {
		h_log("FAILED (seed %#" PRIx64 "; replay with COLLC_TEST_SEED=%#" PRIx64 ")",
		      h_seed, h_seed);
		h_daemon_log_tail(40);
		return 1;
	}
	h_log("PASS");
	return 0;
}

/* Processes */

static void track(pid_t pid)
{
	for (int i = 0; i < nchildren; i++)
		if (children[i] == 0) {
			children[i] = pid;
			return;
		}
	if (nchildren < H_MAX_CHILDREN)
		children[nchildren++] = pid;
}

static void untrack(pid_t pid)
{
	for (int i = 0; i < nchildren; i++)
		if (children[i] == pid)
			children[i] = 0;
}

pid_t h_fork(h_fn fn, void *arg)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid < 0)
		h_die("fork: %s", strerror(errno));
	if (pid == 0) {
		int r;

		signal(SIGTERM, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != main_pid)
			_exit(127);
		nchildren = 0;
		/* A child that hangs ends itself a little after the parent's watchdog would. */
		alarm(h_watchdog_s + 2);
		r = fn(arg);
		fflush(NULL);
		_exit(r & 0xff);
	}
	track(pid);
	return pid;
}

struct rank_call {
	h_rank_fn fn;
	int rank, nranks;
	void *arg;
};

static int call_rank(void *arg)
{
	struct rank_call *c = arg;

	return c->fn(c->rank, c->nranks, c->arg);
}

pid_t h_spawn(h_rank_fn fn, int rank, int nranks, void *arg)
{
	/* The child runs on its copy of c: it is valid there until it exits. */
	struct rank_call c = { fn, rank, nranks, arg };

	return h_fork(call_rank, &c);
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

				h_describe_status(st, why, sizeof(why));
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
		h_die("too many ranks: %d", nranks);
	for (int r = 0; r < nranks; r++)
		pids[r] = h_spawn(fn, r, nranks, arg);
	return h_reap(pids, nranks, NULL, 3000);
}

int h_run_comm_test(struct collc_unique_id *ids, int nids, int nranks, h_rank_fn fn, void *arg)
{
	h_daemon_start(NULL);
	h_unique_ids(ids, nids);
	return h_finish(h_run_ranks(nranks, fn, arg));
}

int h_reap_one(pid_t pid, int timeout_ms, int *status)
{
	uint64_t deadline = timeout_ms < 0 ? UINT64_MAX
					   : h_now_ns() + (uint64_t)timeout_ms * 1000000;
	int st;

	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);

		if (r == pid) {
			untrack(pid);
			if (status)
				*status = st;
			return 0;
		}
		if (r < 0 && errno != EINTR)
			return -errno;
		if (h_now_ns() > deadline)
			return -ETIMEDOUT;
		h_sleep_us(500);
	}
}

int h_reap_one_ok(pid_t pid, int timeout_ms, const char *what)
{
	char why[128];
	int st, r = h_reap_one(pid, timeout_ms, &st);

	if (r == -ECHILD)
		return h_fail("%s (pid %d) is no child of this test (reaped twice?)", what,
			      (int)pid);
	if (r < 0) {
		kill(pid, SIGKILL);
		h_reap_one(pid, -1, NULL);
		return h_fail("%s (pid %d) did not finish within %d ms: killed it", what, (int)pid,
			      timeout_ms);
	}
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	h_describe_status(st, why, sizeof(why));
	return h_fail("%s (pid %d) %s", what, (int)pid, why);
}

int h_proc_count(pid_t pid, const char *dir)
{
	char path[64];
	struct dirent *d;
	DIR *dp;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, dir);
	dp = opendir(path);
	if (!dp)
		return -1;
	while ((d = readdir(dp)))
		n += d->d_name[0] != '.';
	closedir(dp);
	return n;
}

/* Ranks */

int h_connect(struct collc_ctx **ret_ctx)
{
	int r, tries = 0;

	for (;;) {
		r = collc_connect(h_sock, ret_ctx);
		if (r != -EAGAIN && r != -ECONNREFUSED && r != -ENOENT)
			return r;
		if (++tries >= suite.connect_tries)
			return r;
		h_sleep_us(5000);
	}
}

void h_unique_ids(struct collc_unique_id *ids, int n)
{
	struct collc_ctx *ctx;
	int r = h_connect(&ctx);

	if (r < 0)
		h_die("collc_connect(%s) for unique ids: %s", h_sock, collc_strerror(r));
	for (int i = 0; i < n; i++) {
		r = collc_get_unique_id(ctx, &ids[i]);
		if (r < 0)
			h_die("collc_get_unique_id: %s", collc_strerror(r));
	}
	collc_disconnect(ctx);
}

void h_unique_id(struct collc_unique_id *id)
{
	h_unique_ids(id, 1);
}

int h_join(const struct collc_unique_id *id, int nranks, int rank, struct collc_ctx **ret_ctx,
	   struct collc_comm **ret_comm)
{
	struct collc_ctx *ctx;
	int r = h_connect(&ctx);

	if (r < 0) {
		h_fail("rank %d/%d: collc_connect: %s", rank, nranks, collc_strerror(r));
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

void h_leave(struct collc_ctx *ctx, struct collc_comm *comm)
{
	collc_comm_destroy(comm);
	collc_disconnect(ctx);
}

int h_join_alloc(const struct collc_unique_id *id, int nranks, int rank, size_t bytes,
		 struct collc_ctx **ret_ctx, struct collc_comm **ret_comm, void **ret_send,
		 void **ret_recv)
{
	int r = h_join(id, nranks, rank, ret_ctx, ret_comm);

	if (r < 0)
		return r;
	r = collc_mem_alloc(*ret_ctx, bytes, -1, ret_send);
	if (r == 0 && ret_recv)
		r = collc_mem_alloc(*ret_ctx, bytes, -1, ret_recv);
	if (r < 0)
		h_fail("rank %d/%d: collc_mem_alloc of %zu bytes: %s", rank, nranks, bytes,
		       collc_strerror(r));
	return r;
}

int h_allreduce(const struct rc_case *c, struct collc_ctx *ctx, struct collc_comm *comm, int rank,
		int nranks, void *send, void *recv, const char *what)
{
	collc_req req;
	int r;

	rc_fill(c, rank, send);
	r = collc_allreduce(comm, send, recv, c->count, c->dtype, c->op, &req);
	if (r == 0)
		r = collc_wait(ctx, req, 10000);
	if (r < 0)
		return h_fail("rank %d: %s: %s", rank, what, collc_strerror(r));
	return rc_check(c, nranks, recv, what, NULL);
}

int h_join_allreduce(const struct collc_unique_id *id, const struct rc_case *c, int times, int rank,
		     int nranks, const char *what)
{
	size_t bytes = c->count * rc_size(c->dtype);
	struct rc_case ci = *c;
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	void *send, *recv;

	if (h_join_alloc(id, nranks, rank, bytes, &ctx, &comm, &send, &recv) < 0)
		return 1;
	for (int i = 0; i < times; i++, ci.seed++)
		if (h_allreduce(&ci, ctx, comm, rank, nranks, send, recv, what))
			return 1;
	collc_comm_destroy(comm);
	collc_disconnect(ctx);
	return 0;
}

/* Shared memory */

void *h_shared(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		h_die("mmap %zu shared bytes: %s", bytes, strerror(errno));
	return p;
}

void h_store(uint32_t *word, uint32_t value)
{
	__atomic_store_n(word, value, __ATOMIC_SEQ_CST);
	syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

uint32_t h_load(const uint32_t *word)
{
	return __atomic_load_n(word, __ATOMIC_SEQ_CST);
}

uint32_t h_add(uint32_t *word, uint32_t value)
{
	uint32_t v = __atomic_add_fetch(word, value, __ATOMIC_SEQ_CST);

	syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
	return v;
}

int h_wait_at_least(const uint32_t *word, uint32_t value, int timeout_ms)
{
	uint64_t deadline = timeout_ms < 0 ? UINT64_MAX
					   : h_now_ns() + (uint64_t)timeout_ms * 1000000;

	for (;;) {
		uint32_t v = __atomic_load_n(word, __ATOMIC_SEQ_CST);
		struct timespec ts = { 0, 2000000 };

		if (v >= value)
			return 0;
		if (h_now_ns() > deadline)
			return -ETIMEDOUT;
		syscall(SYS_futex, word, FUTEX_WAIT, v, &ts, NULL, 0);
	}
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

	if (__atomic_add_fetch(&b->count, 1, __ATOMIC_ACQ_REL) == b->n) {
		/* count is zero before gen moves: whoever sees the new gen sees it zeroed */
		__atomic_store_n(&b->count, 0, __ATOMIC_RELAXED);
		h_store(&b->gen, gen + 1);
		return 0;
	}
	return h_wait_at_least(&b->gen, gen + 1, timeout_ms);
}

/* Time and randomness */

uint64_t h_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void h_sleep_us(uint64_t us)
{
	struct timespec ts = { (time_t)(us / 1000000), (long)(us % 1000000) * 1000 };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

uint64_t h_mix(uint64_t x)
{
	return rc_mix(x);
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

/* Commands and sockets */

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

		if (h_now_ns() - t0 > (uint64_t)suite.command_ms * 1000000ull) {
			h_log("command ran past %d s, killing it: %s", suite.command_ms / 1000,
			      cmd);
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

int h_send_fds(int fd, const void *buf, size_t len, const int *fds, int nfds, int flags)
{
	return scm_send(fd, buf, len, fds, nfds, flags);
}

int h_raw_connect(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), err;

	if (fd < 0)
		return -errno;
	memcpy(sa.sun_path, h_sock, strnlen(h_sock, sizeof(sa.sun_path) - 1));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

size_t h_raw_msg(void *buf, uint16_t type, uint32_t id, const void *payload, size_t len)
{
	struct collc_msg_hdr h = { COLLC_WIRE_MAGIC, COLLC_WIRE_VERSION, type, (uint32_t)len, id };

	memcpy(buf, &h, sizeof(h));
	if (len)
		memcpy((char *)buf + sizeof(h), payload, len);
	return sizeof(h) + len;
}

ssize_t h_recv_fds(int fd, void *buf, size_t len, int *fds, int max_fds, int *nfds, int timeout_ms)
{
	union {
		char b[CMSG_SPACE(sizeof(int) * H_MAX_SEND_FDS)];
		struct cmsghdr align;
	} u;
	struct iovec iov = { buf, len };
	struct msghdr mh = {
		.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof(u.b)
	};
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int kept = 0;
	ssize_t n;

	if (nfds)
		*nfds = 0;
	if (poll(&p, 1, timeout_ms) <= 0)
		return -ETIMEDOUT;
	n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n < 0)
		return -errno;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
			int f;

			memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (fds && nfds && kept < max_fds)
				fds[kept++] = f;
			else
				close(f);
		}
	}
	if (nfds)
		*nfds = kept;
	return n;
}

char *h_daemon_sets(const char *base, int nranks, int argc, char **argv, const char **dargs)
{
	char name[256];
	int nd = 0, n = snprintf(name, sizeof(name), "%s_%dranks", base, nranks);

	for (int i = 2; i + 1 < argc && nd < 30; i++)
		if (strcmp(argv[i], "--set") == 0) {
			dargs[nd++] = argv[i];
			dargs[nd++] = argv[++i];
			if (n > 0 && (size_t)n < sizeof(name))
				n += snprintf(name + n, sizeof(name) - (size_t)n, "_%s", argv[i]);
		}
	dargs[nd] = NULL;
	return strdup(name);
}

struct json *h_status_json(char *out, size_t outlen)
{
	char cmd[512], err[128];
	struct json *root;

	snprintf(cmd, sizeof(cmd), "%s --socket %s status --json", h_collcctl(), h_sock);
	if (h_run_capture(cmd, out, outlen) != 0) {
		h_fail("collcctl status --json failed:\n%s", out);
		return NULL;
	}
	root = json_parse(out, strlen(out), err, sizeof(err));
	if (!root)
		h_fail("collcctl status --json: %s", err);
	return root;
}

/* 1 when the forming communicator f has nranks ranks and exactly the ranks of mask joined. */
static int forming_is(const struct json *f, uint32_t nranks, uint64_t mask)
{
	const struct json *ranks = json_get(f, "joined_ranks");
	uint64_t got = 0;

	if (json_num(json_get(f, "nranks"), -1) != nranks || !ranks || ranks->type != JSON_ARRAY)
		return 0;
	for (size_t i = 0; i < ranks->n; i++) {
		double r = json_num(json_at(ranks, i), -1);

		if (r < 0 || r >= 64)
			return 0;
		got |= 1ull << (unsigned)r;
	}
	return got == mask && json_num(json_get(f, "joined"), -1) == __builtin_popcountll(mask);
}

int h_wait_forming(uint32_t nranks, uint64_t joined_mask, int timeout_ms)
{
	static char out[1 << 20];
	uint64_t end = h_now_ns() + (uint64_t)timeout_ms * 1000000ull;

	for (;;) {
		struct json *root = h_status_json(out, sizeof(out));
		const struct json *forming;
		int found = 0;

		if (!root)
			return 1;
		forming = json_get(root, "forming");
		if (!forming || forming->type != JSON_ARRAY) {
			json_free(root);
			return h_fail("status --json: no \"forming\" array");
		}
		for (size_t i = 0; i < forming->n && !found; i++)
			found = forming_is(json_at(forming, i), nranks, joined_mask);
		json_free(root);
		if (found)
			return 0;
		if (h_now_ns() > end)
			return h_fail(
				"status --json: no forming communicator of %u ranks with ranks "
				"%#llx joined after %d ms:\n%s",
				nranks, (unsigned long long)joined_mask, timeout_ms, out);
		usleep(10000);
	}
}

int h_check_by_op(const char *const *ops, int nops)
{
	static char out[1 << 20];
	const struct json *by;
	struct json *root = h_status_json(out, sizeof(out));
	int r = 0;

	if (!root)
		return 1;
	by = json_get(json_get(root, "totals"), "by_op");
	for (int i = 0; i < nops && r == 0; i++) {
		const struct json *n = json_get(by, ops[i]);

		if (!n || n->type != JSON_NUMBER || n->number <= 0)
			r = h_fail("status --json: totals.by_op.%s missing or 0", ops[i]);
		else
			h_log("status --json: totals.by_op.%s = %.0f", ops[i], n->number);
	}
	json_free(root);
	return r;
}

uint8_t h_pattern(uint64_t k, uint32_t from, uint32_t to, uint64_t b)
{
	/* One hash per 8 bytes: the byte loops ask for the same word 8 times in a row. */
	static uint64_t last_key = UINT64_MAX, last_word = UINT64_MAX, last;
	uint64_t key = h_seed ^ (k << 40) ^ ((uint64_t)from << 32) ^ ((uint64_t)to << 24);

	if (key != last_key || b / 8 != last_word) {
		last_key = key;
		last_word = b / 8;
		last = h_mix(key ^ (b / 8 * 0x9e3779b97f4a7c15ull));
	}
	return (uint8_t)(last >> (8 * (b % 8)));
}
