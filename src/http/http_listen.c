/* HTTP listeners: what starting a libmicrohttpd daemon needs besides the
 * request path (http.c): TLS options from the PEM files, the admin_listen
 * daemon, libmicrohttpd's logger and the callback that keeps URLs as sent. */
#include "http_int.h"

#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "config.h"
#include "log.h"

/* Keeps the URL as sent: the router splits the raw path and decodes each
 * segment itself, so "%2F" and "%00" cannot change the shape of a path. */
size_t http_no_unescape(void *cls, struct MHD_Connection *conn, char *uri)
{
	(void)cls;
	(void)conn;
	return strlen(uri);
}

void http_redact_paths(const char *in, char *out, size_t outlen)
{
	size_t o = 0;

	/* every run that starts with '/' after a space, a quote, ':' or '='
	 * (a path, a URL's path) is replaced, up to a space or a quote */
	for (size_t i = 0; in[i] != '\0' && in[i] != '\n' && o + 7 < outlen;) {
		if (in[i] == '/' && (i == 0 || strchr(" '`\":=", in[i - 1]) != NULL)) {
			while (in[i] != '\0' && in[i] != '\n' && in[i] != ' ' && in[i] != '\'' &&
			       in[i] != '`' && in[i] != '"')
				i++;
			memcpy(out + o, "[path]", 6);
			o += 6;
		} else {
			out[o++] = in[i++];
		}
	}
	out[o] = '\0';
}

void http_mhd_log(void *cls, const char *fmt, va_list ap)
{
	char msg[512], out[512];

	(void)cls;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	/* its messages may quote the request's path, which holds caller keys
	 * and tokens */
	http_redact_paths(msg, out, sizeof(out));
	log_warn("http: %s", out);
}

/* Reads a PEM file (at most 1 MiB) into a new NUL-terminated string. */
static char *http_read_pem(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t n = 0;

	if (f == NULL) {
		log_error("http: cannot open %s: %s", path, strerror(errno));
		return NULL;
	}
	buf = malloc(1024 * 1024 + 1);
	if (buf != NULL) {
		n = fread(buf, 1, 1024 * 1024, f);
		buf[n] = '\0';
		if (ferror(f) || n == 0) {
			log_error("http: cannot read %s", path);
			free(buf);
			buf = NULL;
		}
	}
	fclose(f);
	return buf;
}

/* The TLS options of the daemon: MHD_OPTION_END alone for plain HTTP. */
int http_tls_options(const struct config *cfg, struct MHD_OptionItem opts[3], char **cert,
		     char **key, unsigned *flags)
{
	opts[0] = (struct MHD_OptionItem){ MHD_OPTION_END, 0, NULL };
	*cert = *key = NULL;
	if (cfg->tls_cert_file == NULL)
		return 0;
	if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
		log_error("http: this libmicrohttpd has no TLS support");
		return -1;
	}
	*cert = http_read_pem(cfg->tls_cert_file);
	*key = http_read_pem(cfg->tls_key_file);
	if (*cert == NULL || *key == NULL)
		return -1;
	opts[0] = (struct MHD_OptionItem){ MHD_OPTION_HTTPS_MEM_CERT, 0, *cert };
	opts[1] = (struct MHD_OptionItem){ MHD_OPTION_HTTPS_MEM_KEY, 0, *key };
	opts[2] = (struct MHD_OptionItem){ MHD_OPTION_END, 0, NULL };
	*flags |= MHD_USE_TLS;
	return 0;
}

struct addrinfo *http_listen_address(const char *what, const char *host, unsigned port,
				     unsigned *flags)
{
	struct addrinfo hints = { 0 }, *ai = NULL;
	char service[8];

	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
	snprintf(service, sizeof(service), "%u", port);
	int rc = getaddrinfo(host, service, &hints, &ai);
	if (rc != 0) {
		log_error("http: cannot resolve %s address %s: %s", what, host, gai_strerror(rc));
		return NULL;
	}
	*flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC | MHD_USE_ERROR_LOG |
		 MHD_ALLOW_SUSPEND_RESUME;
	if (ai->ai_family == AF_INET6)
		*flags |= MHD_USE_IPv6;
	return ai;
}

struct MHD_Daemon *http_admin_start(const struct config *cfg, void *access_cls)
{
	struct MHD_Daemon *d;
	unsigned flags;
	struct addrinfo *ai = http_listen_address("admin_listen", cfg->admin_listen_host,
						  cfg->admin_listen_port, &flags);

	if (ai == NULL)
		return NULL;
	d = MHD_start_daemon(flags, cfg->admin_listen_port, NULL, NULL, http_access, access_cls,
			     MHD_OPTION_EXTERNAL_LOGGER, http_mhd_log, NULL, MHD_OPTION_SOCK_ADDR,
			     ai->ai_addr, MHD_OPTION_CONNECTION_LIMIT, 64u,
			     MHD_OPTION_CONNECTION_TIMEOUT,
			     (unsigned)cfg->connection_timeout_seconds,
			     MHD_OPTION_CONNECTION_MEMORY_LIMIT, HTTP_CONNECTION_MEMORY,
			     MHD_OPTION_NOTIFY_COMPLETED, http_completed, NULL,
			     MHD_OPTION_NOTIFY_CONNECTION, http_connection, NULL,
			     MHD_OPTION_UNESCAPE_CALLBACK, http_no_unescape, NULL,
			     MHD_OPTION_URI_LOG_CALLBACK, http_target_seen, NULL, MHD_OPTION_END);
	freeaddrinfo(ai);
	if (d == NULL) {
		log_error("http: cannot listen on admin_listen %s:%u", cfg->admin_listen_host,
			  cfg->admin_listen_port);
		return NULL;
	}
	log_info("http: admin listener (/metrics, /healthz, /readyz) on %s:%u",
		 cfg->admin_listen_host, cfg->admin_listen_port);
	return d;
}
