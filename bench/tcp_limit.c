/* SPDX-License-Identifier: MIT */
/*
 * The raw TCP limit (tcp_limit.h). Four processes a kind of stream: for each
 * direction a receiver in the destination daemon's network namespace
 * (listening on an ephemeral port, publishing its port and addresses in
 * shared memory) and a sender in the source daemon's namespace that streams
 * for the given time and closes. The receiver's bytes / (last byte - first
 * byte) is the figure. Every wait is bounded.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/proc.h"
#include "bench/tcp_limit.h"

#define TL_ADDRS     8
#define TL_BUF       (1u << 20) /* bytes a write() or read() call */
#define TL_WAIT_S    10.0
#define TL_CONNECT_S 3

struct tl_dir {
	volatile int ready; /* written by the receiver once port and addrs are valid */
	int port;
	int naddrs;
	char addrs[TL_ADDRS][INET_ADDRSTRLEN];
	double gbps;
	char err[200];
};

struct tl_shared {
	struct tl_dir dir[2];
	volatile int pinned; /* a stream process took its daemon's CPUs */
};

/* Non-loopback IPv4 addresses of the current namespace, up to TL_ADDRS. */
static int own_addrs(struct tl_dir *d)
{
	struct ifaddrs *ifa, *p;

	if (getifaddrs(&ifa) < 0)
		return -errno;
	for (p = ifa; p && d->naddrs < TL_ADDRS; p = p->ifa_next) {
		if (!p->ifa_addr || p->ifa_addr->sa_family != AF_INET ||
		    (p->ifa_flags & IFF_LOOPBACK) || !(p->ifa_flags & IFF_UP))
			continue;
		inet_ntop(AF_INET, &((struct sockaddr_in *)p->ifa_addr)->sin_addr,
			  d->addrs[d->naddrs++], INET_ADDRSTRLEN);
	}
	freeifaddrs(ifa);
	return d->naddrs ? 0 : -EADDRNOTAVAIL;
}

static int enter(int nsfd, struct tl_dir *d)
{
	if (setns(nsfd, CLONE_NEWNET) < 0) {
		snprintf(d->err, sizeof(d->err), "setns: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/*
 * A stream's buffer of span bytes (at least TL_BUF), every page written
 * before the clock starts: bytes that are not zero, so that the sender does
 * not read the kernel's one zero page over and over.
 */
static char *stream_buf(size_t span)
{
	char *buf = malloc(span);

	if (buf)
		for (size_t i = 0; i < span; i++)
			buf[i] = (char)(i * 131 + 7);
	return buf;
}

/* Where the call after one that moved n bytes at off starts: the buffer walked, wrapping. */
static size_t stream_next(size_t off, size_t n, size_t span)
{
	off += n;
	return off + TL_BUF > span ? 0 : off;
}

static int receiver(int nsfd, int same_ns, struct tl_dir *d, size_t span)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	struct pollfd pfd;
	unsigned long long bytes = 0;
	double t0 = 0, t1 = 0;
	size_t off = 0;
	char *buf;
	int lfd, fd, one = 1;

	if (enter(nsfd, d) < 0)
		return 1;
	buf = stream_buf(span);
	if (!buf) {
		snprintf(d->err, sizeof(d->err), "out of memory for a %zu-byte buffer", span);
		return 1;
	}
	if (same_ns) {
		snprintf(d->addrs[0], INET_ADDRSTRLEN, "127.0.0.1");
		d->naddrs = 1;
	} else if (own_addrs(d) < 0) {
		snprintf(d->err, sizeof(d->err), "no IPv4 address in the daemon's namespace");
		return 1;
	}
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 1) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&sa, &len) < 0) {
		snprintf(d->err, sizeof(d->err), "listen: %s", strerror(errno));
		return 1;
	}
	d->port = ntohs(sa.sin_port);
	__atomic_store_n(&d->ready, 1, __ATOMIC_RELEASE);
	pfd = (struct pollfd){ .fd = lfd, .events = POLLIN };
	if (poll(&pfd, 1, (int)(TL_WAIT_S * 1000)) != 1 || (fd = accept(lfd, NULL, NULL)) < 0) {
		snprintf(d->err, sizeof(d->err), "no sender connected within %.0f s", TL_WAIT_S);
		return 1;
	}
	for (;;) {
		ssize_t n;

		pfd = (struct pollfd){ .fd = fd, .events = POLLIN };
		if (poll(&pfd, 1, (int)(TL_WAIT_S * 1000)) != 1) {
			snprintf(d->err, sizeof(d->err), "the stream stalled");
			return 1;
		}
		n = read(fd, buf + off, TL_BUF);
		if (n <= 0)
			break;
		off = stream_next(off, (size_t)n, span);
		t1 = bench_now();
		if (!t0)
			t0 = t1;
		bytes += (unsigned long long)n;
	}
	free(buf);
	close(fd);
	close(lfd);
	if (t1 <= t0) {
		snprintf(d->err, sizeof(d->err), "nothing received");
		return 1;
	}
	d->gbps = (double)bytes / (t1 - t0) / 1e9;
	return 0;
}

static int connect_bounded(const char *addr, int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	struct pollfd pfd;
	int fd, err = 0;
	socklen_t len = sizeof(err);

	if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
		return -EINVAL;
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS) {
		err = -errno;
		close(fd);
		return err;
	}
	pfd = (struct pollfd){ .fd = fd, .events = POLLOUT };
	if (poll(&pfd, 1, TL_CONNECT_S * 1000) != 1 ||
	    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err) {
		close(fd);
		return err ? -err : -ETIMEDOUT;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	return fd;
}

static int sender(int nsfd, struct tl_dir *d, double seconds, size_t span)
{
	double t_end, deadline = bench_now() + TL_WAIT_S;
	size_t off = 0;
	char *buf;
	int fd = -1;

	if (enter(nsfd, d) < 0)
		return 1;
	buf = stream_buf(span);
	if (!buf) {
		snprintf(d->err, sizeof(d->err), "out of memory for a %zu-byte buffer", span);
		return 1;
	}
	while (!__atomic_load_n(&d->ready, __ATOMIC_ACQUIRE)) {
		if (bench_now() > deadline)
			return 1; /* the receiver says why */
		bench_sleep_ms(5);
	}
	for (int i = 0; i < d->naddrs && fd < 0; i++)
		fd = connect_bounded(d->addrs[i], d->port);
	if (fd < 0) {
		char addr[INET_ADDRSTRLEN];

		memcpy(addr, d->addrs[0], sizeof(addr));
		snprintf(d->err, sizeof(d->err), "connect to %s port %d: %s", addr, d->port,
			 strerror(-fd));
		return 1;
	}
	t_end = bench_now() + seconds;
	while (bench_now() < t_end) {
		ssize_t n = write(fd, buf + off, TL_BUF);

		if (n < 0)
			break;
		off = stream_next(off, (size_t)n, span);
	}
	free(buf);
	close(fd);
	return 0;
}

static int ns_fd(pid_t pid, struct stat *st)
{
	char path[64];
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0 && fstat(fd, st) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* The daemons' processes and namespaces a measurement streams between. */
struct tl_ends {
	pid_t pa, pb;
	int fa, fb; /* their network namespaces */
	int same;   /* one namespace: over 127.0.0.1 */
};

/*
 * One kind of stream, both directions at once, from and to buffers of span
 * bytes: 0 with sh->dir[].gbps, or -1 with an error in err.
 */
static int streams(const struct tl_ends *e, double seconds, size_t span, struct tl_shared *sh,
		   char *err, size_t errlen)
{
	pid_t pids[4];
	int bad = 0;

	memset(sh, 0, sizeof(*sh));
	/* dir 0: a -> b (receiver in b), dir 1: b -> a (receiver in a). */
	for (int k = 0; k < 4; k++) {
		int dir = k & 1, recv = k < 2;
		int in_b = (dir == 0) == recv;

		pids[k] = bench_fork();
		if (pids[k] == 0) {
			int fd = in_b ? e->fb : e->fa;

			/* On the CPUs of that namespace's daemon, where collc's traffic runs. */
			if (bench_follow_cpus(in_b ? e->pb : e->pa) > 0)
				sh->pinned = 1;
			_exit(recv ? receiver(fd, e->same, &sh->dir[dir], span)
				   : sender(fd, &sh->dir[dir], seconds, span));
		}
	}
	for (int k = 0; k < 4; k++) {
		int st;

		if (pids[k] < 0) {
			bad = 1;
			continue;
		}
		while (waitpid(pids[k], &st, 0) < 0 && errno == EINTR)
			;
		bench_child_del(pids[k]);
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			bad = 1;
	}
	if (!bad && sh->dir[0].gbps > 0 && sh->dir[1].gbps > 0)
		return 0;
	snprintf(err, errlen, "%s",
		 sh->dir[0].err[0]   ? sh->dir[0].err
		 : sh->dir[1].err[0] ? sh->dir[1].err
				     : "a stream process failed");
	return -1;
}

int tcp_limit_measure(const char *sock_a, const char *sock_b, double seconds, uint64_t mem_bytes,
		      struct tcp_limit *ret)
{
	struct tl_shared *sh;
	struct stat st_a, st_b;
	struct tl_ends e;

	memset(ret, 0, sizeof(*ret));
	if (mem_bytes && (mem_bytes < TL_BUF || mem_bytes > TCP_LIMIT_MEM_MAX)) {
		snprintf(ret->err, sizeof(ret->err),
			 "a from-memory buffer of %llu bytes (1 MiB to 1 GiB)",
			 (unsigned long long)mem_bytes);
		return -1;
	}
	e.pa = bench_socket_pid(sock_a);
	e.pb = bench_socket_pid(sock_b);
	if (e.pa <= 0 || e.pb <= 0) {
		snprintf(ret->err, sizeof(ret->err), "no daemon's pid from %s",
			 e.pa <= 0 ? sock_a : sock_b);
		return -1;
	}
	e.fa = ns_fd(e.pa, &st_a);
	e.fb = ns_fd(e.pb, &st_b);
	if (e.fa < 0 || e.fb < 0) {
		snprintf(ret->err, sizeof(ret->err), "/proc/%d/ns/net: %s", e.fa < 0 ? e.pa : e.pb,
			 strerror(errno));
		if (e.fa >= 0)
			close(e.fa);
		return -1;
	}
	e.same = st_a.st_ino == st_b.st_ino && st_a.st_dev == st_b.st_dev;
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED) {
		close(e.fa);
		close(e.fb);
		snprintf(ret->err, sizeof(ret->err), "mmap: %s", strerror(errno));
		return -1;
	}
	if (streams(&e, seconds, TL_BUF, sh, ret->err, sizeof(ret->err)) == 0) {
		ret->ok = 1;
		for (int d = 0; d < 2; d++)
			ret->gbps[d] = sh->dir[d].gbps;
		snprintf(ret->where, sizeof(ret->where),
			 "collcd %d's namespace <-> %s in collcd %d's%s, one stream each way at "
			 "once for %.1f s%s",
			 (int)e.pa, sh->dir[0].addrs[0], (int)e.pb, e.same ? " (the same one)" : "",
			 seconds, sh->pinned ? ", each end on its daemon's CPUs" : "");
		/* A failed from-memory stream leaves mem_gbps 0: the table says so. */
		if (mem_bytes &&
		    streams(&e, seconds, (size_t)mem_bytes, sh, ret->err, sizeof(ret->err)) == 0) {
			for (int d = 0; d < 2; d++)
				ret->mem_gbps[d] = sh->dir[d].gbps;
		}
		ret->mem_bytes = mem_bytes;
	}
	close(e.fa);
	close(e.fb);
	munmap(sh, sizeof(*sh));
	return ret->ok ? 0 : -1;
}
