/* SPDX-License-Identifier: MIT */
/*
 * Reliability-test harness (see rel.h). What the watchdog and the signal
 * handlers touch is async-signal-safe: they kill, write and unlink.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rel.h"

#ifndef COLLCD_PATH
#error "COLLCD_PATH must name the collcd binary"
#endif
#ifndef COLLCCTL_PATH
#error "COLLCCTL_PATH must name the collcctl binary"
#endif

const char *rel_name = "rel";
uint64_t rel_seed;
char rel_sock[128];
pid_t rel_daemon_pid;
unsigned rel_watchdog_s;
long rel_daemon_nofile;

static pid_t main_pid;
static char tmpdir[64];
static char logpath[160];
static pid_t children[REL_MAX_CHILDREN];
static int nchildren;

/* Output */

static void vline(const char *tag, const char *fmt, va_list ap)
{
	char buf[4096];
	int n = snprintf(buf, sizeof(buf), "[%s]%s%s ", rel_name, tag[0] ? " " : "", tag);

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

void rel_log(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vline("", fmt, ap);
	va_end(ap);
}

int rel_fail(const char *fmt, ...)
{
	char tag[96];
	va_list ap;

	snprintf(tag, sizeof(tag), "FAIL (seed %#" PRIx64 ", pid %d):", rel_seed, (int)getpid());
	va_start(ap, fmt);
	vline(tag, fmt, ap);
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

void rel_daemon_log_tail(int lines)
{
	fflush(stdout);
	log_tail_raw(lines);
}

/* Cleanup */

static void kill_everything(void)
{
	for (int i = 0; i < nchildren; i++)
		if (children[i] > 0) {
			kill(children[i], SIGCONT);
			kill(children[i], SIGKILL);
		}
	if (rel_daemon_pid > 0)
		kill(rel_daemon_pid, SIGKILL);
}

static void cleanup_files(void)
{
	if (rel_sock[0]) {
		char admin[160];

		unlink(rel_sock);
		/* By hand: snprintf is not async-signal-safe. */
		strcpy(admin, rel_sock);
		strcat(admin, ".admin");
		unlink(admin);
	}
	if (logpath[0] && !getenv("COLLC_TEST_KEEP"))
		unlink(logpath);
	if (tmpdir[0])
		rmdir(tmpdir);
}

static void at_exit(void)
{
	if (getpid() != main_pid)
		return;
	kill_everything();
	for (int i = 0; i < nchildren; i++)
		if (children[i] > 0)
			waitpid(children[i], NULL, 0);
	if (rel_daemon_pid > 0)
		waitpid(rel_daemon_pid, NULL, 0);
	rel_daemon_pid = 0;
	cleanup_files();
}

static void on_alarm(int sig)
{
	(void)sig;
	if (getpid() != main_pid) {
		sig_write("[");
		sig_write(rel_name);
		sig_write("] a child process hit its watchdog (pid ");
		sig_write_num((uint64_t)getpid(), 0);
		sig_write(")\n");
		_exit(124);
	}
	sig_write("[");
	sig_write(rel_name);
	sig_write("] FAIL: TIMEOUT: watchdog fired after ");
	sig_write_num(rel_watchdog_s, 0);
	sig_write(" s (seed ");
	sig_write_num(rel_seed, 1);
	sig_write("; replay with COLLC_TEST_SEED=");
	sig_write_num(rel_seed, 1);
	sig_write(")\n");
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
	sig_write(rel_name);
	sig_write("] killed by a signal: cleaning up\n");
	kill_everything();
	cleanup_files();
	_exit(128 + sig);
}

uint64_t rel_env_u64(const char *name, uint64_t dflt)
{
	const char *v = getenv(name);

	return v && *v ? strtoull(v, NULL, 0) : dflt;
}

int rel_sanitized(void)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	return 1;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
	return 1;
#else
	return 0;
#endif
#else
	return 0;
#endif
}

int rel_tsan(void)
{
#if defined(__SANITIZE_THREAD__)
	return 1;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
	return 1;
#else
	return 0;
#endif
#else
	return 0;
#endif
}

void rel_init(const char *name, int argc, char **argv, unsigned watchdog_s)
{
	const char *env = getenv("COLLC_TEST_SEED");
	struct sigaction sa = { 0 };

	rel_name = name;
	main_pid = getpid();
	setvbuf(stdout, NULL, _IOLBF, 0);
	rel_seed = 0x636f6c6c63ull;
	for (const char *p = name; *p; p++)
		rel_seed = rel_mix(rel_seed ^ (uint64_t)(unsigned char)*p);
	if (env && *env)
		rel_seed = strtoull(env, NULL, 0);
	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], "--seed") == 0)
			rel_seed = strtoull(argv[i + 1], NULL, 0);
	rel_log("seed %#" PRIx64 " (replay: COLLC_TEST_SEED=%#" PRIx64 "), watchdog %u s%s", rel_seed,
		rel_seed, watchdog_s, rel_sanitized() ? ", sanitizer build" : "");
	sigemptyset(&sa.sa_mask);
	sa.sa_handler = on_alarm;
	sigaction(SIGALRM, &sa, NULL);
	sa.sa_handler = on_term;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	atexit(at_exit);
	rel_watchdog_s = watchdog_s;
	alarm(watchdog_s);
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/collc-rel-XXXXXX");
	if (!mkdtemp(tmpdir)) {
		tmpdir[0] = '\0';
		rel_die("mkdtemp: %s", strerror(errno));
	}
	snprintf(rel_sock, sizeof(rel_sock), "%s/collcd.sock", tmpdir);
	snprintf(logpath, sizeof(logpath), "%s/collcd.log", tmpdir);
}

void rel_die(const char *fmt, ...)
{
	char tag[96];
	va_list ap;

	snprintf(tag, sizeof(tag), "FAIL (seed %#" PRIx64 ", pid %d):", rel_seed, (int)getpid());
	va_start(ap, fmt);
	vline(tag, fmt, ap);
	va_end(ap);
	if (getpid() != main_pid) {
		fflush(NULL);
		_exit(1);
	}
	rel_daemon_log_tail(40);
	exit(1);
}

void rel_skip(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vline("SKIP:", fmt, ap);
	va_end(ap);
	if (getpid() != main_pid) {
		fflush(NULL);
		_exit(REL_SKIP);
	}
	exit(REL_SKIP);
}

/* Processes */

static void track(pid_t pid)
{
	for (int i = 0; i < nchildren; i++)
		if (children[i] == 0) {
			children[i] = pid;
			return;
		}
	if (nchildren < REL_MAX_CHILDREN)
		children[nchildren++] = pid;
}

static void untrack(pid_t pid)
{
	for (int i = 0; i < nchildren; i++)
		if (children[i] == pid)
			children[i] = 0;
}

void rel_describe_status(int st, char *out, size_t len)
{
	if (WIFEXITED(st))
		snprintf(out, len, "exited with status %d%s", WEXITSTATUS(st),
			 WEXITSTATUS(st) == 124 ? " (its watchdog fired)" : "");
	else if (WIFSIGNALED(st))
		snprintf(out, len, "killed by signal %d (%s)%s", WTERMSIG(st), strsignal(WTERMSIG(st)),
			 WCOREDUMP(st) ? ", core dumped" : "");
	else
		snprintf(out, len, "status %#x", st);
}

pid_t rel_spawn(rel_fn fn, void *arg)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid < 0)
		rel_die("fork: %s", strerror(errno));
	if (pid == 0) {
		int r;

		signal(SIGTERM, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != main_pid)
			_exit(127);
		nchildren = 0;
		rel_daemon_pid = 0;
		/* A child that hangs ends itself a little after the parent's watchdog would. */
		alarm(rel_watchdog_s + 2);
		r = fn(arg);
		fflush(NULL);
		_exit(r & 0xff);
	}
	track(pid);
	return pid;
}

int rel_reap(pid_t pid, int timeout_ms, int *status)
{
	uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : rel_now_ns() + (uint64_t)timeout_ms * 1000000;
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
		if (rel_now_ns() > deadline)
			return -ETIMEDOUT;
		rel_sleep_us(500);
	}
}

int rel_reap_ok(pid_t pid, int timeout_ms, const char *what)
{
	char why[128];
	int st, r = rel_reap(pid, timeout_ms, &st);

	if (r == -ECHILD)
		return rel_fail("%s (pid %d) is no child of this test (reaped twice?)", what, (int)pid);
	if (r < 0) {
		kill(pid, SIGKILL);
		rel_reap(pid, -1, NULL);
		return rel_fail("%s (pid %d) did not finish within %d ms: killed it", what, (int)pid,
				timeout_ms);
	}
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	rel_describe_status(st, why, sizeof(why));
	return rel_fail("%s (pid %d) %s", what, (int)pid, why);
}

int rel_wait_in_poll(pid_t pid, int timeout_ms)
{
	uint64_t deadline = rel_now_ns() + (uint64_t)timeout_ms * 1000000;
	char path[64], buf[64];

	snprintf(path, sizeof(path), "/proc/%d/syscall", (int)pid);
	while (rel_now_ns() < deadline) {
		FILE *f = fopen(path, "re");
		long nr = -1;

		if (f) {
			if (fgets(buf, sizeof(buf), f))
				nr = strtol(buf, NULL, 10);
			fclose(f);
		}
#ifdef SYS_poll
		if (nr == SYS_poll)
			return 0;
#endif
		if (nr == SYS_ppoll)
			return 0;
		rel_sleep_us(500);
	}
	return -ETIMEDOUT;
}

/* The daemon */

static int daemon_status = -1;

static int daemon_reaped(void)
{
	int st;

	if (rel_daemon_pid <= 0)
		return 1;
	if (waitpid(rel_daemon_pid, &st, WNOHANG) == rel_daemon_pid) {
		daemon_status = st;
		rel_daemon_pid = 0;
		return 1;
	}
	return 0;
}

int rel_daemon_alive(void)
{
	return !daemon_reaped();
}

void rel_daemon_start(const char *const *extra_args)
{
	const char *bin = getenv("COLLCD") ? getenv("COLLCD") : COLLCD_PATH;
	const char *argv[64];
	int argc = 0, logfd;
	uint64_t t0;
	pid_t pid;

	if (access(bin, X_OK) < 0)
		rel_skip("collcd binary %s is not executable: %s", bin, strerror(errno));
	logfd = open(logpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (logfd < 0)
		rel_die("%s: %s", logpath, strerror(errno));
	argv[argc++] = bin;
	argv[argc++] = "--socket";
	argv[argc++] = rel_sock;
	argv[argc++] = "--foreground";
	if (getenv("COLLC_TEST_DEBUG")) {
		argv[argc++] = "--log-level";
		argv[argc++] = "debug";
	}
	for (int i = 0; extra_args && extra_args[i] && argc < 62; i++)
		argv[argc++] = extra_args[i];
	argv[argc] = NULL;
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		rel_die("fork: %s", strerror(errno));
	if (pid == 0) {
		signal(SIGTERM, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
		signal(SIGALRM, SIG_DFL);
		signal(SIGPIPE, SIG_DFL);
		alarm(0);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != main_pid)
			_exit(127);
		if (rel_daemon_nofile > 0) {
			struct rlimit rl;

			getrlimit(RLIMIT_NOFILE, &rl);
			rl.rlim_cur = (rlim_t)rel_daemon_nofile;
			setrlimit(RLIMIT_NOFILE, &rl);
		}
		dup2(logfd, STDOUT_FILENO);
		dup2(logfd, STDERR_FILENO);
		execv(bin, (char *const *)argv);
		dprintf(STDERR_FILENO, "exec %s: %s\n", bin, strerror(errno));
		_exit(127);
	}
	close(logfd);
	rel_daemon_pid = pid;
	daemon_status = -1;
	t0 = rel_now_ns();
	for (;;) {
		struct collc_ctx *ctx;
		char why[128];
		int r;

		if (daemon_reaped()) {
			rel_describe_status(daemon_status, why, sizeof(why));
			rel_die("collcd %s before it accepted connections", why);
		}
		r = collc_connect(rel_sock, &ctx);
		if (r == 0) {
			collc_disconnect(ctx);
			break;
		}
		if (rel_now_ns() - t0 > 20000000000ull)
			rel_die("collcd did not accept connections on %s within 20 s: %s", rel_sock,
				collc_strerror(r));
		rel_sleep_us(5000);
	}
	rel_log("collcd pid %d serving %s (%.1f ms to start)", (int)pid, rel_sock,
		(double)(rel_now_ns() - t0) / 1e6);
}

uint64_t rel_daemon_kill9(void)
{
	uint64_t t = rel_now_ns();

	if (rel_daemon_pid > 0) {
		kill(rel_daemon_pid, SIGKILL);
		waitpid(rel_daemon_pid, NULL, 0);
		rel_daemon_pid = 0;
		daemon_status = -1;
	}
	return t;
}

int rel_daemon_log_has_report(void)
{
	static const char *const pats[] = { "ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
					    "WARNING: ThreadSanitizer", "ThreadSanitizer: ",
					    "runtime error: ", "SUMMARY: UndefinedBehaviorSanitizer" };
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

int rel_daemon_stop(void)
{
	char why[128];
	int st = 0, bad = 0;

	if (rel_daemon_pid <= 0 && daemon_status == -1)
		return 0;
	if (daemon_reaped() && daemon_status != -1) {
		rel_describe_status(daemon_status, why, sizeof(why));
		rel_fail("collcd died during the test: %s", why);
		daemon_status = -1;
		return -1;
	}
	kill(rel_daemon_pid, SIGTERM);
	for (int i = 0; i < 1000; i++) {
		if (waitpid(rel_daemon_pid, &st, WNOHANG) == rel_daemon_pid)
			goto reaped;
		rel_sleep_us(10000);
	}
	rel_fail("collcd did not exit within 10 s of SIGTERM: killing it");
	kill(rel_daemon_pid, SIGKILL);
	waitpid(rel_daemon_pid, &st, 0);
	bad = 1;
reaped:
	rel_daemon_pid = 0;
	daemon_status = -1;
	if (!bad && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
		rel_describe_status(st, why, sizeof(why));
		rel_fail("collcd %s after SIGTERM (want a clean exit 0: a sanitizer or leak report?)", why);
		bad = 1;
	}
	if (rel_daemon_log_has_report()) {
		rel_fail("collcd's log holds a sanitizer report");
		bad = 1;
	}
	return bad ? -1 : 0;
}

int rel_daemon_fds(void)
{
	char path[64];
	struct dirent *d;
	DIR *dir;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)rel_daemon_pid);
	dir = opendir(path);
	if (!dir)
		return -1;
	while ((d = readdir(dir)))
		n += d->d_name[0] != '.';
	closedir(dir);
	return n;
}

int rel_daemon_settled_fds(void)
{
	int last = rel_daemon_fds(), same = 0;

	for (int i = 0; i < 150 && same < 10; i++) {
		int n;

		rel_sleep_us(20000);
		n = rel_daemon_fds();
		same = n == last ? same + 1 : 0;
		last = n;
	}
	return last;
}

long rel_daemon_rss_kb(void)
{
	char path[64], line[256];
	long kb = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)rel_daemon_pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

int rel_finish(int failed)
{
	int dfail = rel_daemon_stop() < 0;

	if (failed || dfail) {
		rel_log("FAILED (seed %#" PRIx64 "; replay with COLLC_TEST_SEED=%#" PRIx64 ")", rel_seed,
			rel_seed);
		rel_daemon_log_tail(40);
		return 1;
	}
	rel_log("PASS");
	return 0;
}

/* collcctl */

int rel_ctl(char *out, size_t outlen, const char *args)
{
	char cmd[512];
	size_t n = 0;
	int p[2], st;
	pid_t pid;
	uint64_t deadline;

	snprintf(cmd, sizeof(cmd), "exec %s --socket %s %s", COLLCCTL_PATH, rel_sock, args);
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (pid == 0) {
		signal(SIGALRM, SIG_DFL);
		alarm(20);
		dup2(p[1], STDOUT_FILENO);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	deadline = rel_now_ns() + 20000000000ull;
	for (;;) {
		struct pollfd pf = { .fd = p[0], .events = POLLIN };
		ssize_t k;

		if (poll(&pf, 1, 100) <= 0) {
			if (rel_now_ns() > deadline)
				break;
			continue;
		}
		k = read(p[0], out + n, n + 1 < outlen ? outlen - n - 1 : 0);
		if (k <= 0) {
			if (k == 0 && n + 1 >= outlen) {
				/* out is full: drain the rest */
				char junk[4096];

				if (read(p[0], junk, sizeof(junk)) > 0)
					continue;
			}
			break;
		}
		n += (size_t)k;
	}
	close(p[0]);
	if (outlen)
		out[n < outlen ? n : outlen - 1] = '\0';
	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

struct jv *rel_status(void)
{
	static char buf[1 << 20];
	struct jv *v;
	int r = rel_ctl(buf, sizeof(buf), "status --json");

	if (r != 0) {
		rel_fail("collcctl status --json exited %d: %.200s", r, buf);
		return NULL;
	}
	v = jv_parse(buf);
	if (!v)
		rel_fail("collcctl status --json printed no valid JSON: %.300s", buf);
	return v;
}

const struct jv *rel_status_client(const struct jv *st, pid_t pid)
{
	const struct jv *cl = jv_get(st, "clients");

	for (size_t i = 0; cl && i < cl->n; i++) {
		const struct jv *c = jv_at(cl, i);

		if ((pid_t)jv_num(jv_get(c, "pid"), -1) == pid)
			return c;
	}
	return NULL;
}

const struct jv *rel_status_comm(const struct jv *st, uint64_t comm_id)
{
	const struct jv *cm = jv_get(st, "comms");

	for (size_t i = 0; cm && i < cm->n; i++) {
		const struct jv *c = jv_at(cm, i);

		if ((uint64_t)jv_num(jv_get(c, "id"), -1) == comm_id)
			return c;
	}
	return NULL;
}

/* Shared memory */

void *rel_shared(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		rel_die("mmap %zu shared bytes: %s", bytes, strerror(errno));
	return p;
}

void rel_store(uint32_t *word, uint32_t value)
{
	__atomic_store_n(word, value, __ATOMIC_SEQ_CST);
	syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

uint32_t rel_load(const uint32_t *word)
{
	return __atomic_load_n(word, __ATOMIC_SEQ_CST);
}

uint32_t rel_add(uint32_t *word, uint32_t value)
{
	uint32_t v = __atomic_add_fetch(word, value, __ATOMIC_SEQ_CST);

	syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
	return v;
}

int rel_wait_at_least(const uint32_t *word, uint32_t value, int timeout_ms)
{
	uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : rel_now_ns() + (uint64_t)timeout_ms * 1000000;

	for (;;) {
		uint32_t v = __atomic_load_n(word, __ATOMIC_SEQ_CST);
		struct timespec ts = { 0, 2000000 };

		if (v >= value)
			return 0;
		if (rel_now_ns() > deadline)
			return -ETIMEDOUT;
		syscall(SYS_futex, word, FUTEX_WAIT, v, &ts, NULL, 0);
	}
}

void rel_barrier_init(struct rel_barrier *b, uint32_t n)
{
	b->n = n;
	b->count = 0;
	b->gen = 0;
}

int rel_barrier_wait(struct rel_barrier *b, int timeout_ms)
{
	uint32_t gen = __atomic_load_n(&b->gen, __ATOMIC_ACQUIRE);

	if (__atomic_add_fetch(&b->count, 1, __ATOMIC_ACQ_REL) == b->n) {
		__atomic_store_n(&b->count, 0, __ATOMIC_RELAXED);
		rel_store(&b->gen, gen + 1);
		return 0;
	}
	return rel_wait_at_least(&b->gen, gen + 1, timeout_ms);
}

/* Time and randomness */

uint64_t rel_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void rel_sleep_us(uint64_t us)
{
	struct timespec ts = { (time_t)(us / 1000000), (long)(us % 1000000) * 1000 };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

uint64_t rel_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

uint64_t rel_rand(uint64_t *state)
{
	*state += 0x9e3779b97f4a7c15ull;
	return rel_mix(*state);
}

uint64_t rel_rand_below(uint64_t *state, uint64_t n)
{
	return n ? rel_rand(state) % n : 0;
}

void rel_unique_ids(struct collc_unique_id *ids, int n)
{
	struct collc_ctx *ctx;
	int r = rel_connect(&ctx);

	if (r < 0)
		rel_die("connect for unique ids: %s", collc_strerror(r));
	for (int i = 0; i < n; i++) {
		r = collc_get_unique_id(ctx, &ids[i]);
		if (r < 0)
			rel_die("collc_get_unique_id: %s", collc_strerror(r));
	}
	collc_disconnect(ctx);
}

int rel_connect(struct collc_ctx **ret_ctx)
{
	int r = -EAGAIN;

	for (int i = 0; i < 200; i++) {
		r = collc_connect(rel_sock, ret_ctx);
		if (r != -EAGAIN && r != -ECONNREFUSED && r != -ENOENT)
			return r;
		rel_sleep_us(5000);
	}
	return r;
}

int rel_join(const struct collc_unique_id *id, int nranks, int rank, struct collc_ctx **ret_ctx,
	     struct collc_comm **ret_comm)
{
	struct collc_ctx *ctx;
	int r = rel_connect(&ctx);

	if (r < 0) {
		rel_fail("rank %d/%d: collc_connect: %s", rank, nranks, collc_strerror(r));
		return r;
	}
	r = collc_comm_init(ctx, id, nranks, rank, -1, ret_comm);
	if (r < 0) {
		rel_fail("rank %d/%d: collc_comm_init: %s", rank, nranks, collc_strerror(r));
		collc_disconnect(ctx);
		return r;
	}
	*ret_ctx = ctx;
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

uint64_t rel_percentile(uint64_t *v, size_t n, double p)
{
	size_t i;

	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), cmp_u64);
	i = (size_t)(p * (double)(n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}
