/*
 * HTTP internals shared by http.c (the daemon and the request path),
 * http_conn.c (per-connection state and the request deadline reaper) and
 * http_reply.c (replies). Not for other modules: they see http.h.
 * Ownership: arguments are borrowed for the call unless noted.
 */
#ifndef IDEMD_HTTP_INT_H
#define IDEMD_HTTP_INT_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>

#include "auth.h"
#include "http.h"

struct addrinfo;
struct config;

/* SO_SNDBUF of every connection (the kernel doubles it): what the kernel
 * may hold of an answer its client does not read */
#define HTTP_SNDBUF_BYTES (256 * 1024)

/* requests alive, and of them connections between suspend and resume
 * (http_request.c) */
extern atomic_int http_active;
extern atomic_int http_suspended;

/* A request's context from its connection, URL, method and version as
 * libmicrohttpd gives them to the access handler (its headers scanned and
 * their raw section checked, its id and trace set), or NULL when out of
 * memory. URL is copied; CONN and METHOD are borrowed for the request's
 * life. Owned: http_completed() frees it (http_request_free), the one
 * place that does. */
struct request *http_request_new(struct MHD_Connection *conn, const char *url, const char *method,
				 const char *version);
/* Frees REQ itself (what it points to is freed already), or keeps it for
 * the thread's next http_request_new. */
void http_request_free(struct request *req);
/* 1 when the libmicrohttpd running is the one whose header section
 * http_request_new can check byte for byte (0.9.75: a NUL in a value, an
 * obs-fold line refused); with another the check is off. */
int http_raw_supported(void);
/* libmicrohttpd's URI log callback (MHD_OPTION_URI_LOG_CALLBACK): notes
 * the request target as sent, before libmicrohttpd cuts it at its '?' and
 * its arguments' separators, on the connection for http_request_new, which
 * refuses a target holding a NUL or another control byte. Returns NULL. */
void *http_target_seen(void *cls, const char *uri, struct MHD_Connection *conn);
/* The last thing done with REQ before it is freed (http_grace_done). */
void http_epoch_leave(const struct request *req);

/* What outlives one request on a connection. */
struct http_conn {
	struct auth_memo hc_auth; /* the API key it last authenticated with */
	/* monotonic ms since which the connection has been receiving a
	 * request (opened, or answered its previous one); 0 while a request
	 * is being answered. The reaper closes it past request_timeout. */
	_Atomic int64_t hc_since;
	MHD_socket hc_fd;
	/* the request target as the URI log callback saw it (http_target_seen):
	 * borrowed from libmicrohttpd's read buffer until the request's
	 * context is made, its length up to its first NUL, and whether that
	 * much holds a control byte */
	const char *hc_target;
	size_t hc_target_len;
	int hc_target_ctl;
	/* the client slot its connection is counted in (http_conn_cap), when
	 * counted */
	size_t hc_slot;
	int hc_counted;
	struct http_conn *hc_prev, *hc_next; /* in http_conns, under its lock */
};

/* http_conn.c */
/* Monotonic milliseconds, never 0. */
static inline int64_t http_now_ms(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000 + 1;
}

/* Marks the request's connection as receiving a request (YES: its deadline
 * starts now) or being answered (0). */
static inline void http_receiving(struct request *req, int yes)
{
	if (req->req_conn_ctx != NULL)
		atomic_store(&req->req_conn_ctx->hc_since, yes ? http_now_ms() : 0);
}
/* libmicrohttpd's connection notification: makes or wipes its state. CLS
 * is NULL, or (the API daemon's) a pointer to the most connections one
 * client may hold at once (max_connections_per_ip, 0: no cap), borrowed for
 * the daemon's life: its connections are counted per client as the body
 * budget counts them (http_client_slot: an IPv4 address, an IPv6 prefix of
 * ipv6_client_prefix bits), and one over the cap is shut down at once. */
void http_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
		     enum MHD_ConnectionNotificationCode toe);
/* Starts the reaper (request_timeout_seconds of CFG, borrowed until
 * http_conn_stop()): 0, or -1 after logging. */
int http_conn_start(const struct config *cfg) IDEMD_WUR;
/* Stops the reaper; safe when not started. */
void http_conn_stop(void);

/* http.c: libmicrohttpd's access and completion callbacks */
enum MHD_Result http_access(void *cls, struct MHD_Connection *conn, const char *url,
			    const char *method, const char *version, const char *upload_data,
			    size_t *upload_data_size, void **con_cls);
void http_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
		    enum MHD_RequestTerminationCode toe);

/* http_listen.c */
/* Keeps the URL as sent: the router decodes each segment itself. */
size_t http_no_unescape(void *cls, struct MHD_Connection *conn, char *uri);
/* Copies IN (up to its first newline) into OUT with every path replaced
 * by "[path]": what libmicrohttpd's messages may quote of a request. */
void http_redact_paths(const char *in, char *out, size_t outlen);
/* libmicrohttpd's messages as warn lines. */
void http_mhd_log(void *cls, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
/* The daemon's TLS options into OPTS (MHD_OPTION_END alone for plain HTTP),
 * the PEM texts into *CERT and *KEY, owned: the caller frees both with
 * free(), the key wiped first, once the daemon has started (OPTS point into
 * them); MHD_USE_TLS added to *FLAGS. 0, or -1 after logging (*CERT and
 * *KEY may still be set: the caller frees them as well). */
int http_tls_options(const struct config *cfg, struct MHD_OptionItem opts[3], char **cert,
		     char **key, unsigned *flags) IDEMD_WUR;
/* The address to listen on, HOST and PORT resolved (WHAT names the key
 * in the log), owned (freeaddrinfo()), with the daemon's flags for it in
 * *FLAGS (the usual ones, MHD_USE_IPv6 for an IPv6 address); NULL after
 * logging. */
struct addrinfo *http_listen_address(const char *what, const char *host, unsigned port,
				     unsigned *flags);
/* Starts the admin_listen daemon (plain HTTP, one thread, few
 * connections), whose requests get ACCESS_CLS (borrowed for the daemon's
 * life): the daemon, owned (MHD_stop_daemon()), or NULL after logging. */
struct MHD_Daemon *http_admin_start(const struct config *cfg, void *access_cls);

/* http_reply.c */
/* Drops the reply built so far. */
void http_clear_reply(struct request *req);

/* The body budget (http_budget.c). Take counts N more bytes of REQ's body
 * against the whole budget, its client address's share and its tenant's:
 * 1, or 0 when one of them would be passed. Give returns all REQ holds
 * (http_budget_return, when it holds any).
 * Start reads CFG's limits, borrowed until a grace period begun after the
 * next http_budget_start() is done (http_reload). */
void http_budget_start(const struct config *cfg);
#define HTTP_CLIENT_SLOTS AUTH_CLIENT_SLOTS
/* The slot (0 .. HTTP_CLIENT_SLOTS - 1) of CONN's client, the peer's
 * address, never a header's (http_client_slot_of with the configured
 * ipv6_client_prefix). */
size_t http_client_slot(struct MHD_Connection *conn);
/* The slot of client address SA (borrowed; NULL or neither IPv4 nor IPv6:
 * slot 0): an IPv4 address whole, an IPv4-mapped IPv6 address as that IPv4
 * address, any other IPv6 address by its first V6_PREFIX bits (1..128), so
 * that the addresses of one prefix are one client. A hash keyed with random
 * bytes drawn once per process, so collisions cannot be chosen. */
size_t http_client_slot_of(const struct sockaddr *sa, int v6_prefix);
int http_budget_take(struct request *req, size_t n) IDEMD_WUR;
void http_budget_return(struct request *req);
static inline void http_budget_give(struct request *req)
{
	if (req->req_reserved != 0)
		http_budget_return(req);
}

#endif
