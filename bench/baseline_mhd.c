/* Benchmark baseline A: a trivial libmicrohttpd server started with the same
 * daemon flags and options as idemd's HTTP core (epoll, internal thread
 * pool, connection limit, timeout, per-connection memory, backlog). It reads
 * and drops any request body and answers every request with one static JSON
 * response, so it measures what the HTTP layer alone costs on this machine.
 * The same program, started with --status 201 and one thread, is the static
 * upstream of the gateway scenarios.
 *
 * usage: baseline_mhd --port N [--threads N] [--connections N]
 *                     [--timeout S] [--status CODE] [--memory KIB]
 * --memory is the per-connection memory limit (default 16 KiB, as idemd).
 */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
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

static enum MHD_Result bm_access(void *cls, struct MHD_Connection *conn, const char *url,
				 const char *method, const char *version,
				 const char *upload_data, size_t *upload_data_size,
				 void **con_cls)
{
	static int first_call_marker;

	(void)cls;
	(void)url;
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
	unsigned port = 0, threads = 8, connections = 4096, timeout = 30, memory_kib = 16;
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
		else {
			fprintf(stderr, "baseline_mhd: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	if (port == 0 || port > 65535 || argc % 2 == 0) {
		fprintf(stderr, "usage: baseline_mhd --port N [--threads N] [--connections N] "
				"[--timeout S] [--status CODE] [--memory KIB]\n");
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

	struct sockaddr_in addr;
	memset(&addr, 0, sizeof(addr));
	addr.sin_family = AF_INET;
	addr.sin_port = htons((uint16_t)port);
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	struct MHD_Daemon *d = MHD_start_daemon(
		MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC | MHD_USE_ERROR_LOG,
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
	return 0;
}
