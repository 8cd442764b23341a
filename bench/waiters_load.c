/* waiters_load: the load generator of the waiter bench. Opens N connections
 * (spread round-robin over one or more idemd ports), each sending one claim
 * of the same in-progress caller key with "Prefer: wait=W", waits until
 * they are parked (no answer for --settle-ms after the last request went
 * out), reads the RSS of the given idemd processes, then completes the
 * record on the first port and times every waiter's answer from the moment
 * the completion's 200 was read. Once all are answered it closes them and
 * reads the RSS again 2 s later (rest) and, with --trim-s T, T s after the
 * close (trim: after idemd's periodic return of freed memory). One thread, epoll, non-blocking sockets:
 * every timestamp is taken when the answer's first bytes are read.
 *
 *   waiters_load --ports P1[,P2..] --n N --op OP --key KEY --api-key K
 *                [--wait W] [--pids PID1[,PID2..]] [--settle-ms MS]
 *                [--timeout-s S] [--trim-s T]
 *
 * Prints one line: WAITERS_RESULT key=value ... (latencies in µs, signed:
 * an answer read before the completion's own 200 counts negative; the
 * answer phase as phase_mono_us=FROM-TO, CLOCK_MONOTONIC µs). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_PORTS 8
#define MAX_CONNECTING 256
#define HEAD_MAX 2048

enum wl_state { WL_IDLE, WL_CONNECTING, WL_SENT, WL_DONE };

struct wl_conn {
	int fd;
	enum wl_state state;
	int status;          /* HTTP status of the answer */
	int replayed;        /* Idempotent-Replayed: true */
	int early;           /* answered before the completion was sent */
	int64_t at_us;       /* first bytes of the answer */
	size_t len;
	char *head;          /* the answer's head, until it is complete */
};

static int64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void die(const char *msg)
{
	perror(msg);
	exit(1);
}

static int parse_list(const char *s, long *out, int max)
{
	int n = 0;
	char *end;

	while (*s != '\0' && n < max) {
		out[n++] = strtol(s, &end, 10);
		s = *end == ',' ? end + 1 : end;
		if (end == s && *s != '\0')
			break;
	}
	return n;
}

static long rss_kb(long pid)
{
	char path[64], line[256];
	long kb = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%ld/status", pid);
	if ((f = fopen(path, "r")) == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL)
		if (strncmp(line, "VmRSS:", 6) == 0)
			kb = strtol(line + 6, NULL, 10);
	fclose(f);
	return kb;
}

static int start_connect(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;

	if (fd < 0)
		die("socket");
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS)
		die("connect");
	return fd;
}

/* Reads what the connection has; returns 1 once the answer's head is in. */
static int read_answer(struct wl_conn *c, int64_t t)
{
	char buf[4096];
	ssize_t r;

	while ((r = read(c->fd, buf, sizeof(buf))) > 0) {
		if (c->at_us == 0)
			c->at_us = t;
		size_t take = (size_t)r;
		if (c->head == NULL && (c->head = malloc(HEAD_MAX + 1)) == NULL)
			die("malloc");
		if (take > HEAD_MAX - c->len)
			take = HEAD_MAX - c->len;
		memcpy(c->head + c->len, buf, take);
		c->len += take;
		c->head[c->len] = '\0';
	}
	if (c->head == NULL) /* nothing yet, or closed without an answer */
		return r == 0 ? -1 : 0;
	if (strstr(c->head, "\r\n\r\n") == NULL && c->len < HEAD_MAX && r != 0)
		return 0;
	c->status = (int)strtol(c->head + 9, NULL, 10);
	c->replayed = strcasestr(c->head, "\r\nIdempotent-Replayed: true") != NULL;
	free(c->head);
	c->head = NULL;
	return 1;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	long ports[MAX_PORTS], pids[MAX_PORTS];
	int nports = 0, npids = 0, n = 10000, wait_s = 60, settle_ms = 2000, timeout_s = 30,
	    trim_s = 0;
	const char *op = "order.create", *key = NULL, *api_key = NULL;

	for (int i = 1; i + 1 < argc; i += 2) {
		const char *a = argv[i], *v = argv[i + 1];
		if (strcmp(a, "--ports") == 0) nports = parse_list(v, ports, MAX_PORTS);
		else if (strcmp(a, "--pids") == 0) npids = parse_list(v, pids, MAX_PORTS);
		else if (strcmp(a, "--n") == 0) n = atoi(v);
		else if (strcmp(a, "--op") == 0) op = v;
		else if (strcmp(a, "--key") == 0) key = v;
		else if (strcmp(a, "--api-key") == 0) api_key = v;
		else if (strcmp(a, "--wait") == 0) wait_s = atoi(v);
		else if (strcmp(a, "--settle-ms") == 0) settle_ms = atoi(v);
		else if (strcmp(a, "--timeout-s") == 0) timeout_s = atoi(v);
		else if (strcmp(a, "--trim-s") == 0) trim_s = atoi(v);
		else { fprintf(stderr, "waiters_load: unknown option %s\n", a); return 2; }
	}
	if (nports == 0 || key == NULL || api_key == NULL || n <= 0) {
		fprintf(stderr, "usage: waiters_load --ports P[,P] --n N --key KEY --api-key K ...\n");
		return 2;
	}
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		if (rl.rlim_cur < (rlim_t)n + 64) {
			fprintf(stderr, "waiters_load: open-file limit %lu is below %d\n",
				(unsigned long)rl.rlim_cur, n + 64);
			return 1;
		}
	}

	static const char claim_body[] = "{\"request\":{\"sku\":\"A-1\",\"qty\":2}}";
	static const char done_body[] =
		"{\"attempt\":1,\"status\":201,\"body\":{\"order_id\":\"o-1\",\"total\":\"19.99\"}}";
	char claim[1024], complete[1024];
	int claim_len = snprintf(claim, sizeof(claim),
		"POST /v1/operations/%s/keys/%s/claim HTTP/1.1\r\nHost: 127.0.0.1\r\n"
		"Authorization: Bearer %s\r\nContent-Type: application/json\r\nPrefer: wait=%d\r\n"
		"Content-Length: %zu\r\n\r\n%s",
		op, key, api_key, wait_s, sizeof(claim_body) - 1, claim_body);
	int complete_len = snprintf(complete, sizeof(complete),
		"POST /v1/operations/%s/keys/%s/complete HTTP/1.1\r\nHost: 127.0.0.1\r\n"
		"Authorization: Bearer %s\r\nContent-Type: application/json\r\n"
		"Connection: close\r\nContent-Length: %zu\r\n\r\n%s",
		op, key, api_key, sizeof(done_body) - 1, done_body);

	/* conns[n] is the completion */
	struct wl_conn *conns = calloc((size_t)n + 1, sizeof(*conns));
	int ep = epoll_create1(EPOLL_CLOEXEC);
	if (conns == NULL || ep < 0)
		die("setup");
	int next = 0, connecting = 0, sent = 0, closed_early = 0, answered_early = 0;
	int64_t t0 = now_us(), last_event = t0;
	struct epoll_event evs[1024];

	/* phase 1: every waiter connected and its claim sent, then parked */
	for (;;) {
		while (next < n && connecting < MAX_CONNECTING) {
			struct wl_conn *c = &conns[next];
			c->fd = start_connect((int)ports[next % nports]);
			c->state = WL_CONNECTING;
			struct epoll_event ev = { .events = EPOLLOUT, .data.u32 = (uint32_t)next };
			if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) < 0)
				die("epoll_ctl");
			next++;
			connecting++;
		}
		int k = epoll_wait(ep, evs, 1024, 50);
		int64_t t = now_us();
		for (int i = 0; i < k; i++) {
			struct wl_conn *c = &conns[evs[i].data.u32];
			if (c->state == WL_CONNECTING) {
				int err = 0;
				socklen_t el = sizeof(err);
				getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el);
				connecting--;
				if (err != 0 || write(c->fd, claim, (size_t)claim_len) != claim_len) {
					c->state = WL_DONE;
					closed_early++;
					close(c->fd);
					continue;
				}
				c->state = WL_SENT;
				sent++;
				struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP,
							  .data.u32 = evs[i].data.u32 };
				epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
				last_event = t;
			} else if (c->state == WL_SENT) {
				int r = read_answer(c, t);
				if (r != 0) {
					c->state = WL_DONE;
					c->early = 1;
					answered_early++;
					epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
					close(c->fd);
					last_event = t;
				}
			}
		}
		if (next == n && connecting == 0 && t - last_event >= (int64_t)settle_ms * 1000)
			break;
		if (t - t0 > (int64_t)timeout_s * 1000000) {
			fprintf(stderr, "waiters_load: connecting took over %d s\n", timeout_s);
			break;
		}
	}
	int64_t t_parked = now_us();
	long rss[MAX_PORTS];
	for (int i = 0; i < npids; i++)
		rss[i] = rss_kb(pids[i]);

	/* phase 2: the completion, then every waiter's answer */
	struct rusage ru0, ru1;
	getrusage(RUSAGE_SELF, &ru0);
	struct wl_conn *d = &conns[n];
	d->fd = start_connect((int)ports[0]);
	d->state = WL_CONNECTING;
	struct epoll_event dev = { .events = EPOLLOUT, .data.u32 = (uint32_t)n };
	epoll_ctl(ep, EPOLL_CTL_ADD, d->fd, &dev);
	int64_t t_send = 0, t_done = 0;
	int waiting = sent - answered_early, answered = 0;
	for (;;) {
		int k = epoll_wait(ep, evs, 1024, 100);
		int64_t t = now_us();
		for (int i = 0; i < k; i++) {
			uint32_t idx = evs[i].data.u32;
			struct wl_conn *c = &conns[idx];
			if (c->state == WL_CONNECTING) {        /* the completion */
				t_send = now_us();
				if (write(c->fd, complete, (size_t)complete_len) != complete_len)
					die("write completion");
				c->state = WL_SENT;
				struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.u32 = idx };
				epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
				continue;
			}
			if (c->state != WL_SENT)
				continue;
			int r = read_answer(c, t);
			if (r == 0)
				continue;
			c->state = WL_DONE;
			epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
			/* a waiter's connection stays open, as a browser's or an
			 * HTTP client's pool keeps it: closed once all are in */
			if (idx == (uint32_t)n)
				close(c->fd);
			if (idx == (uint32_t)n) {
				t_done = c->at_us;
				if (c->status != 200)
					fprintf(stderr, "waiters_load: the completion answered %d\n", c->status);
			} else {
				answered++;     /* or closed without an answer */
			}
		}
		if (d->state == WL_DONE && answered >= waiting)
			break;
		if (t - t_parked > (int64_t)timeout_s * 1000000)
			break;
	}

	/* figures; the load generator's own CPU time while the answers came in
	 * says whether it, rather than idemd, set the pace */
	getrusage(RUSAGE_SELF, &ru1);
	long long cpu_us = (ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec + ru1.ru_stime.tv_sec -
			    ru0.ru_stime.tv_sec) * 1000000LL + ru1.ru_utime.tv_usec -
			   ru0.ru_utime.tv_usec + ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec;
	for (int i = 0; i < n; i++)
		if (conns[i].state == WL_DONE && !conns[i].early)
			close(conns[i].fd);
	/* what stays once every waiter is answered and gone: the server sees
	 * the closes on its next poll, then frees each connection */
	sleep(2);
	long rest[MAX_PORTS], trim[MAX_PORTS];
	for (int i = 0; i < npids; i++)
		rest[i] = rss_kb(pids[i]);
	if (trim_s > 2)
		sleep((unsigned)trim_s - 2);
	for (int i = 0; i < npids; i++)
		trim[i] = trim_s > 2 ? rss_kb(pids[i]) : rest[i];
	int64_t *lat = malloc(sizeof(int64_t) * (size_t)(n + 1));
	int m = 0, replayed = 0, other = 0, unanswered = 0;
	for (int i = 0; i < n; i++) {
		struct wl_conn *c = &conns[i];
		if (c->early || c->state == WL_IDLE)
			continue;
		if (c->state != WL_DONE || c->at_us == 0 || c->status == 0) {
			unanswered++;
			continue;
		}
		if (c->status == 200 && c->replayed)
			replayed++;
		else
			other++;
		lat[m++] = c->at_us - t_done;
	}
	qsort(lat, (size_t)m, sizeof(*lat), cmp_i64);
#define PCT(p) (m ? lat[(size_t)((double)(m - 1) * (p) / 100.0 + 0.5)] : 0)
	printf("WAITERS_RESULT n=%d ports=%d sent=%d connect_failed=%d answered_early=%d "
	       "answered=%d replayed=%d other_status=%d unanswered=%d complete_status=%d "
	       "complete_us=%lld connect_ms=%lld min_us=%lld p50_us=%lld p90_us=%lld "
	       "p99_us=%lld max_us=%lld loader_cpu_us=%lld",
	       n, nports, sent, closed_early, answered_early, m, replayed, other, unanswered,
	       d->status, (long long)(t_done - t_send), (long long)((t_parked - t0) / 1000),
	       (long long)(m ? lat[0] : 0), (long long)PCT(50), (long long)PCT(90),
	       (long long)PCT(99), (long long)(m ? lat[m - 1] : 0), cpu_us);
	for (int i = 0; i < npids; i++)
		printf(" rss%d_kb=%ld rest%d_kb=%ld trim%d_kb=%ld", i + 1, rss[i], i + 1, rest[i],
		       i + 1, trim[i]);
	/* the answer phase on CLOCK_MONOTONIC, to cut a profile to it
	 * (perf record -k mono, perf report --time) */
	printf(" phase_mono_us=%lld-%lld\n", (long long)t_send,
	       (long long)(m ? t_done + lat[m - 1] : t_done));
	return 0;
}
