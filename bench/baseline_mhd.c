/* Benchmark baseline A: a trivial libmicrohttpd server started with the same
 * daemon flags and options as idemd's HTTP core (epoll, internal thread
 * pool, connection limit, timeout, per-connection memory, backlog). It reads
 * and drops any request body and answers every request with one static JSON
 * response, so it measures what the HTTP layer alone costs on this machine.
 * The same program, started with --status 201 and one thread, is the static
 * upstream of the gateway scenarios.
 *
 * With --park 1 it is the waiter bench's baseline: every request is
 * suspended (as idemd parks a waiting duplicate) until one whose path ends
 * in /complete arrives; that one resumes them all, and each is answered
 * with the static response marked Idempotent-Replayed. So it measures what
 * waking and answering suspended connections costs libmicrohttpd alone.
 *
 * usage: baseline_mhd --port N [--threads N] [--connections N]
 *                     [--timeout S] [--status CODE] [--memory KIB] [--park 1]
 * --memory is the per-connection memory limit (default 16 KiB, as idemd).
 */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* About the size of an idemd issue response. */
static const char bm_body[] =
	"{\"token\":\"AQAAAAAAAQAAAAEAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\","
	"\"id\":\"00000000000000000000000000000000\",\"operation\":\"order.create\","
	"\"subject\":\"user-42\",\"expires_at\":\"2030-01-01T00:00:00.000Z\"}";

static struct MHD_Response *bm_response;
static unsigned bm_status = 200;

/* --park: the suspended connections, until a completion releases them */
static struct {
	pthread_mutex_t lock;
	struct MHD_Connection **conns;
	size_t n, cap;
	int released;
} bm_park = { .lock = PTHREAD_MUTEX_INITIALIZER };
static struct MHD_Response *bm_replayed;

/* --park, the whole request in: 1 when CONN was suspended, else 0 (answer
 * it now). A completion resumes every parked connection. */
static int bm_park_or_release(struct MHD_Connection *conn, const char *url)
{
	size_t len = strlen(url);
	int parked = 0;

	pthread_mutex_lock(&bm_park.lock);
	if (len >= 9 && strcmp(url + len - 9, "/complete") == 0) {
		bm_park.released = 1;
		for (size_t i = 0; i < bm_park.n; i++)
			MHD_resume_connection(bm_park.conns[i]);
		bm_park.n = 0;
	} else if (!bm_park.released) {
		if (bm_park.n == bm_park.cap) {
			size_t cap = bm_park.cap ? 2 * bm_park.cap : 1024;
			struct MHD_Connection **c = realloc(bm_park.conns, cap * sizeof(*c));
			if (c == NULL) {
				pthread_mutex_unlock(&bm_park.lock);
				return 0;
			}
			bm_park.conns = c;
			bm_park.cap = cap;
		}
		MHD_suspend_connection(conn);
		bm_park.conns[bm_park.n++] = conn;
		parked = 1;
	}
	pthread_mutex_unlock(&bm_park.lock);
	return parked;
}

static enum MHD_Result bm_access(void *cls, struct MHD_Connection *conn, const char *url,
				 const char *method, const char *version,
				 const char *upload_data, size_t *upload_data_size,
				 void **con_cls)
{
	static int first_call_marker, parked_marker;

	(void)cls;
	(void)method;
	(void)version;
	(void)upload_data;
	if (*con_cls == NULL) {
		/* first call: headers only, as in idemd */
		*con_cls = &first_call_marker;
		return MHD_YES;
	}
	if (*upload_data_size > 0) {
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (bm_replayed != NULL) {
		if (*con_cls == &parked_marker)	/* resumed by the completion */
			return MHD_queue_response(conn, 200, bm_replayed);
		if (bm_park_or_release(conn, url)) {
			*con_cls = &parked_marker;
			return MHD_YES;
		}
		if (strlen(url) < 9 || strcmp(url + strlen(url) - 9, "/complete") != 0)
			return MHD_queue_response(conn, 200, bm_replayed);
	}
	return MHD_queue_response(conn, bm_status, bm_response);
}

static void bm_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	(void)cls;
	(void)conn;
	(void)toe;
	*con_cls = NULL;
}

static unsigned bm_arg(const char *v, const char *name)
{
	char *end;
	unsigned long n = strtoul(v, &end, 10);

	if (*v == '\0' || *end != '\0' || n == 0 || n > 1000000) {
		fprintf(stderr, "baseline_mhd: bad value for %s: %s\n", name, v);
		exit(2);
	}
	return (unsigned)n;
}

int main(int argc, char **argv)
{
	unsigned port = 0, threads = 8, connections = 4096, timeout = 30, memory_kib = 16, park = 0;
	sigset_t set;
	int sig;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--port") == 0)
			port = bm_arg(argv[i + 1], "--port");
		else if (strcmp(argv[i], "--threads") == 0)
			threads = bm_arg(argv[i + 1], "--threads");
		else if (strcmp(argv[i], "--connections") == 0)
			connections = bm_arg(argv[i + 1], "--connections");
		else if (strcmp(argv[i], "--timeout") == 0)
			timeout = bm_arg(argv[i + 1], "--timeout");
		else if (strcmp(argv[i], "--memory") == 0)
			memory_kib = bm_arg(argv[i + 1], "--memory");
		else if (strcmp(argv[i], "--status") == 0)
			bm_status = bm_arg(argv[i + 1], "--status");
		else if (strcmp(argv[i], "--park") == 0)
			park = bm_arg(argv[i + 1], "--park");
		else {
			fprintf(stderr, "baseline_mhd: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	if (port == 0 || port > 65535 || argc % 2 == 0) {
		fprintf(stderr, "usage: baseline_mhd --port N [--threads N] [--connections N] "
				"[--timeout S] [--status CODE] [--memory KIB] [--park 1]\n");
		return 2;
	}
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);

	bm_response = MHD_create_response_from_buffer(strlen(bm_body), (void *)(uintptr_t)bm_body,
						      MHD_RESPMEM_PERSISTENT);
	if (bm_response == NULL)
		return 1;
	MHD_add_response_header(bm_response, "Content-Type", "application/json");
	MHD_add_response_header(bm_response, "Cache-Control", "no-store");
	if (park) {
		bm_replayed = MHD_create_response_from_buffer(
			strlen(bm_body), (void *)(uintptr_t)bm_body, MHD_RESPMEM_PERSISTENT);
		if (bm_replayed == NULL)
			return 1;
		MHD_add_response_header(bm_replayed, "Content-Type", "application/json");
		MHD_add_response_header(bm_replayed, "Cache-Control", "no-store");
		MHD_add_response_header(bm_replayed, "Idempotent-Replayed", "true");
	}

	struct sockaddr_in addr;
	memset(&addr, 0, sizeof(addr));
	addr.sin_family = AF_INET;
	addr.sin_port = htons((uint16_t)port);
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	struct MHD_Daemon *d = MHD_start_daemon(
		MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC | MHD_USE_ERROR_LOG |
			(park ? MHD_ALLOW_SUSPEND_RESUME : 0),
		(uint16_t)port, NULL, NULL, bm_access, NULL,
		MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
		MHD_OPTION_THREAD_POOL_SIZE, threads,
		MHD_OPTION_CONNECTION_LIMIT, connections,
		MHD_OPTION_CONNECTION_TIMEOUT, timeout,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)memory_kib * 1024,
		MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
		MHD_OPTION_NOTIFY_COMPLETED, bm_completed, NULL,
		MHD_OPTION_END);
	if (d == NULL) {
		fprintf(stderr, "baseline_mhd: cannot listen on port %u\n", port);
		return 1;
	}
	fprintf(stderr, "baseline_mhd: port %u, %u threads, %u connections, %u KiB each, status %u\n",
		port, threads, connections, memory_kib, bm_status);
	sigwait(&set, &sig);
	MHD_stop_daemon(d);
	MHD_destroy_response(bm_response);
	if (bm_replayed != NULL)
		MHD_destroy_response(bm_replayed);
	free(bm_park.conns);
	return 0;
}
