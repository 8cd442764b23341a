/* Upstream: the libcurl multi thread that runs the gateway's forwards, its
 * queue, the answer callbacks and the classification of how a call ended. */
#include "upstream.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "headers.h"
#include "log.h"

#define UPSTREAM_HEADER_NAME_MAX 128
#define UPSTREAM_HEADER_VALUE_MAX 8192
/* below the usual 5 s keep-alive of upstream servers, so that an idle
 * connection is not reused just as the upstream closes it */
#define UPSTREAM_MAX_IDLE_SECONDS 4L

static struct {
	struct workq q;		 /* calls for the thread; open while it runs */
	int running, curl_ready; /* touched by start and stop only */
	CURLM *multi;
	CURL **idle; /* easy handles kept for reuse (thread only) */
	size_t n_idle, cap_idle;
	pthread_t thread;
} up = { .q = WORKQ_INITIALIZER };

void upstream_call_clear(struct upstream_call *c)
{
	json_decref(c->uc_resp_headers);
	c->uc_resp_headers = NULL;
	buf_free(&c->uc_resp);
}

/* ---------------------------------------------------------------- callbacks */

static size_t upstream_on_body(char *data, size_t size, size_t n, void *arg)
{
	struct upstream_call *c = arg;
	size_t len = size * n;

	if (c->uc_resp.b_len + len > c->uc_max_body) {
		c->uc_too_large = 1;
		return 0;
	}
	return buf_add(&c->uc_resp, data, len) == 0 ? len : 0;
}

/* The status of the status line DATA ("HTTP/1.1 200 OK") when it is a
 * final one (200-599), else 0 (1xx, or no three digits after the version). */
static long upstream_status_line(const char *data, size_t len)
{
	const char *sp = memchr(data, ' ', len);
	size_t at = sp != NULL ? (size_t)(sp - data) + 1 : len;

	if (len - at < 3)
		return 0;
	long status = 0;
	for (size_t i = at; i < at + 3; i++) {
		if (data[i] < '0' || data[i] > '9')
			return 0;
		status = status * 10 + (data[i] - '0');
	}
	return status >= 200 && status <= 599 ? status : 0;
}

/* Whether the answer's header LNAME (lower case) is kept (uc_keep). */
static int upstream_keeps(const struct upstream_call *c, const char *lname)
{
	if (headers_never_stored(lname))
		return 0;
	if (strcmp(lname, "content-type") == 0 || strcmp(lname, "content-encoding") == 0)
		return 1;
	for (size_t i = 0; i < c->uc_n_keep; i++)
		if (strcmp(lname, c->uc_keep[i]) == 0)
			return 1;
	return 0;
}

/* A status line DATA (LEN bytes) begins a response: its status, whether
 * it is an interim one (1xx), and no header of an earlier one. */
static void upstream_on_status_line(struct upstream_call *c, const char *data, size_t len)
{
	json_object_clear(c->uc_resp_headers);
	c->uc_final_status = upstream_status_line(data, len);
	const char *sp = memchr(data, ' ', len);
	c->uc_interim = sp != NULL && sp + 1 < data + len && sp[1] == '1';
}

/* The length of the value of header line DATA (LEN bytes; its name NLEN
 * bytes, then a colon when COLON), its line end (CRLF or LF) left out. */
static size_t upstream_value_len(const char *data, size_t len, size_t nlen, int colon)
{
	size_t vlen = len - nlen - (colon ? 1 : 0);

	if (vlen >= 2 && data[len - 2] == '\r' && data[len - 1] == '\n')
		vlen -= 2;
	else if (vlen >= 1 && data[len - 1] == '\n')
		vlen -= 1;
	return vlen;
}

/* Adds the names a Connection header's VALUE (LEN bytes) lists to
 * uc_connection: they are hop-by-hop too, dropped at the end. */
static void upstream_note_connection(struct upstream_call *c, const char *value, size_t len)
{
	size_t used = strlen(c->uc_connection);

	snprintf(c->uc_connection + used, sizeof(c->uc_connection) - used, ",%.*s", (int)len,
		 value);
}

/* The header name NAME (NLEN bytes, at most UPSTREAM_HEADER_NAME_MAX) in
 * lower case into LNAME, NUL-terminated. */
static void upstream_lower_name(char *lname, const char *name, size_t nlen)
{
	for (size_t i = 0; i < nlen; i++)
		lname[i] =
			(char)((name[i] >= 'A' && name[i] <= 'Z') ? name[i] - 'A' + 'a' : name[i]);
	lname[nlen] = '\0';
}

/* Keeps the value from V to END of header LNAME, blanks and line end
 * trimmed, after an earlier one's and ", "; a value that would pass
 * UPSTREAM_HEADER_VALUE_MAX bytes, or is not UTF-8, is dropped (logged). */
static void upstream_keep_value(struct upstream_call *c, const char *lname, const char *v,
				const char *end)
{
	char *joined = NULL;

	while (v < end && (*v == ' ' || *v == '\t'))
		v++;
	while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
		end--;
	const char *prev = json_string_value(json_object_get(c->uc_resp_headers, lname));
	size_t plen = prev ? strlen(prev) + 2 : 0, vlen = (size_t)(end - v);
	if (plen + vlen > UPSTREAM_HEADER_VALUE_MAX || (joined = malloc(plen + vlen + 1)) == NULL) {
		log_warn("upstream: header %s dropped (over %d bytes)", lname,
			 UPSTREAM_HEADER_VALUE_MAX);
		return;
	}
	if (prev != NULL) {
		memcpy(joined, prev, plen - 2);
		memcpy(joined + plen - 2, ", ", 2);
	}
	memcpy(joined + plen, v, vlen);
	json_t *s = json_stringn(joined, plen + vlen);
	if (s == NULL || json_object_set_new(c->uc_resp_headers, lname, s) < 0)
		log_warn("upstream: header %s dropped (not UTF-8)", lname);
	free(joined);
}

/* Keeps the header line DATA when upstream_keeps() says so; repeated headers are
 * joined with ", " (Set-Cookie, which cannot be joined, is never kept).
 * A line that is not "token: value" without control bytes abandons the
 * answer. */
static size_t upstream_on_header(char *data, size_t size, size_t n, void *arg)
{
	struct upstream_call *c = arg;
	size_t len = size * n;
	char name[UPSTREAM_HEADER_NAME_MAX + 1];

	/* libcurl hands trailer fields (after a chunked body) to this callback
	 * too: they are dropped, never stored or replayed as headers */
	if (c->uc_in_trailers)
		return len;
	if (len >= 5 && memcmp(data, "HTTP/", 5) == 0) {
		/* a new response (after 100 Continue): forget the previous one */
		upstream_on_status_line(c, data, len);
		return len;
	}
	if (len == 2 && data[0] == '\r' && data[1] == '\n') {
		c->uc_in_trailers = !c->uc_interim;
		return len; /* the end of the headers */
	}
	const char *colon = memchr(data, ':', len);
	size_t nlen = colon ? (size_t)(colon - data) : 0;
	size_t vlen_all = upstream_value_len(data, len, nlen, colon != NULL);
	if (!headers_is_token(data, nlen) || !headers_value_ok(colon + 1, vlen_all)) {
		c->uc_invalid = 1;
		return 0;
	}
	if (nlen == 10 && strncasecmp(data, "connection", 10) == 0) {
		upstream_note_connection(c, colon + 1, vlen_all);
		return len;
	}
	if (nlen > UPSTREAM_HEADER_NAME_MAX)
		return len;
	upstream_lower_name(name, data, nlen);
	if (!upstream_keeps(c, name))
		return len;
	upstream_keep_value(c, name, colon + 1, data + len);
	return len;
}

static int upstream_on_prereq(void *arg, char *primary_ip, char *local_ip, int primary_port,
			      int local_port)
{
	struct upstream_call *c = arg;

	(void)primary_ip;
	(void)local_ip;
	(void)primary_port;
	(void)local_port;
	/* libcurl resends on a fresh connection when a reused one closed
	 * without an answer; the upstream may have acted on the first copy */
#ifndef IDEMD_MUTANT_RESEND_ALLOWED
	if (c->uc_sent) {
		c->uc_resend_refused = 1;
		return CURL_PREREQFUNC_ABORT;
	}
#endif
	c->uc_sent = 1;
	return CURL_PREREQFUNC_OK;
}

/* ---------------------------------------------------------------- the thread */

/* Sorts how C ended from libcurl's CODE. */
static void upstream_classify(struct upstream_call *c, CURLcode code)
{
	if (c->uc_invalid) {
		c->uc_result = UPSTREAM_INVALID;
		snprintf(c->uc_error, sizeof(c->uc_error), "malformed header line in the answer");
	} else if (c->uc_too_large) {
		c->uc_result = UPSTREAM_TOO_LARGE;
		snprintf(c->uc_error, sizeof(c->uc_error), "answer over %zu bytes", c->uc_max_body);
	} else if (code == CURLE_OK) {
		c->uc_result = UPSTREAM_ANSWERED;
	} else if (c->uc_final_status != 0) {
		/* the upstream answered, then the rest of its answer was lost */
		c->uc_result = UPSTREAM_BROKEN;
		c->uc_status = c->uc_final_status;
		snprintf(c->uc_error, sizeof(c->uc_error), "the answer %ld broke off: %s",
			 c->uc_final_status,
			 code == CURLE_OPERATION_TIMEDOUT ? "not whole within the timeout"
							  : curl_easy_strerror(code));
	} else if (c->uc_resend_refused) {
		c->uc_result = UPSTREAM_FAILED;
		snprintf(c->uc_error, sizeof(c->uc_error), "connection closed without an answer");
	} else if (!c->uc_sent) {
		c->uc_result = UPSTREAM_UNREACHABLE;
	} else {
		c->uc_result = code == CURLE_OPERATION_TIMEDOUT ? UPSTREAM_TIMEOUT
								: UPSTREAM_FAILED;
	}
	if (c->uc_error[0] == '\0')
		snprintf(c->uc_error, sizeof(c->uc_error), "%s", curl_easy_strerror(code));
}

/* libcurl's own account of the exchange: bytes past the answer's end
 * ("Excess found") mean its framing cannot be trusted. */
static int upstream_on_debug(CURL *h, curl_infotype type, char *data, size_t size, void *arg)
{
	struct upstream_call *c = arg;

	(void)h;
	if (type == CURLINFO_TEXT && size >= 12 && memcmp(data, "Excess found", 12) == 0)
		c->uc_invalid = 1;
	return 0;
}

/* Drops the kept headers that the answer's Connection headers name. */
static void upstream_drop_connection_names(struct upstream_call *c)
{
	char name[UPSTREAM_HEADER_NAME_MAX + 1];

	for (const char *p = c->uc_connection; *p != '\0';) {
		p += strspn(p, ", \t");
		size_t len = strcspn(p, ", \t");
		if (len > 0 && len <= UPSTREAM_HEADER_NAME_MAX) {
			for (size_t i = 0; i < len; i++)
				name[i] = (char)((p[i] >= 'A' && p[i] <= 'Z') ? p[i] - 'A' + 'a'
									      : p[i]);
			name[len] = '\0';
			json_object_del(c->uc_resp_headers, name);
		}
		p += len;
	}
}

static void upstream_end(struct upstream_call *c, CURLcode code)
{
	upstream_drop_connection_names(c);
	upstream_classify(c, code);
	c->uc_done(c);
}

/* A new easy handle with the options every call shares, or NULL. Set once:
 * a handle keeps them from call to call (upstream_recycle). */
static CURL *upstream_handle_new(void)
{
	CURL *e = curl_easy_init();

	if (e == NULL)
		return NULL;
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_MAXAGE_CONN, UPSTREAM_MAX_IDLE_SECONDS);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, upstream_on_body);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, upstream_on_header);
	curl_easy_setopt(e, CURLOPT_DEBUGFUNCTION, upstream_on_debug);
	/* the only way libcurl tells of bytes past the answer's end */
	curl_easy_setopt(e, CURLOPT_VERBOSE, 1L);
	curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, upstream_on_prereq);
	return e;
}

/* Points E at call C, or (C NULL) at nothing: every option that libcurl
 * keeps as a pointer into a call, not as a copy. */
static void upstream_point(CURL *e, struct upstream_call *c)
{
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, c ? c->uc_headers : NULL);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, c ? c->uc_error : NULL);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, c);
	curl_easy_setopt(e, CURLOPT_DEBUGDATA, c);
	curl_easy_setopt(e, CURLOPT_PREREQDATA, c);
	curl_easy_setopt(e, CURLOPT_PRIVATE, c);
}

/* Starts C's transfer on the multi handle. */
static void upstream_begin(struct upstream_call *c)
{
	/* a kept handle keeps its DNS cache; connections live in the multi
	 * handle */
	CURL *e = up.n_idle > 0 ? up.idle[--up.n_idle] : upstream_handle_new();

	if (e == NULL) {
		upstream_end(c, CURLE_OUT_OF_MEMORY);
		return;
	}
	/* libcurl copies the strings; the rest is the call's (upstream_point) */
	curl_easy_setopt(e, CURLOPT_URL, c->uc_url);
	curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, c->uc_method);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, c->uc_connect_timeout_ms);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, c->uc_timeout_ms);
	if (c->uc_body_len > 0 || strcmp(c->uc_method, "POST") == 0 ||
	    strcmp(c->uc_method, "PUT") == 0 || strcmp(c->uc_method, "PATCH") == 0) {
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, c->uc_body ? c->uc_body : "");
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)c->uc_body_len);
	} else {
		/* also undoes a previous call's POSTFIELDS */
		curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
	}
	upstream_point(e, c);
	if (curl_multi_add_handle(up.multi, e) != CURLM_OK) {
		curl_easy_cleanup(e);
		upstream_end(c, CURLE_OUT_OF_MEMORY);
	}
}

/* Keeps E for the next call, or frees it. */
static void upstream_recycle(CURL *e)
{
	/* drop every pointer into the call, which its owner frees next; the
	 * options every call shares stay set (upstream_handle_new) */
	upstream_point(e, NULL);
	curl_easy_setopt(e, CURLOPT_POSTFIELDS, NULL);
	if (up.n_idle == up.cap_idle) {
		size_t cap = up.cap_idle ? up.cap_idle * 2 : 16;
		CURL **idle = realloc(up.idle, cap * sizeof(*idle));
		if (idle != NULL) {
			up.idle = idle;
			up.cap_idle = cap;
		}
	}
	if (up.n_idle < up.cap_idle)
		up.idle[up.n_idle++] = e;
	else
		curl_easy_cleanup(e);
}

/* Ends every finished transfer. */
static void upstream_collect(void)
{
	CURLMsg *m;
	int left;

	while ((m = curl_multi_info_read(up.multi, &left)) != NULL) {
		if (m->msg != CURLMSG_DONE)
			continue;
		CURL *e = m->easy_handle;
		CURLcode code = m->data.result;
		char *p = NULL;
		curl_easy_getinfo(e, CURLINFO_PRIVATE, &p);
		struct upstream_call *c = (struct upstream_call *)(void *)p;
		curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &c->uc_status);
		curl_multi_remove_handle(up.multi, e);
		upstream_recycle(e);
		upstream_end(c, code);
	}
}

static void *upstream_thread(void *arg)
{
	int running = 0;

	(void)arg;
	for (;;) {
		int stopping;
		struct workq_item *it = workq_take(&up.q, (size_t)-1, NULL, 0, &stopping);
		while (it != NULL) {
			struct workq_item *next = it->wi_next;
			upstream_begin(WORKQ_JOB(it, struct upstream_call, uc_item));
			it = next;
		}
		curl_multi_perform(up.multi, &running);
		upstream_collect();
		/* once stopping was seen under the lock, no call can be queued */
		if (stopping && running == 0)
			break;
		curl_multi_poll(up.multi, NULL, 0, 1000, NULL);
	}
	return NULL;
}

int upstream_call(struct upstream_call *c)
{
	c->uc_result = UPSTREAM_FAILED;
	c->uc_sent = c->uc_resend_refused = c->uc_too_large = c->uc_invalid = 0;
	c->uc_interim = c->uc_in_trailers = 0;
	c->uc_error[0] = '\0';
	c->uc_connection[0] = '\0';
	c->uc_status = c->uc_final_status = 0;
	upstream_call_clear(c);
	c->uc_resp_headers = json_object();
	if (c->uc_resp_headers == NULL)
		return -1;
	if (workq_push(&up.q, &c->uc_item) < 0)
		return -1;
	/* the multi handle lives until upstream_stop(), after every caller */
	curl_multi_wakeup(up.multi);
	return 0;
}

/* ---------------------------------------------------------------- start, stop */

int upstream_start(void)
{
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		log_error("upstream: libcurl could not be initialised");
		return -1;
	}
	up.curl_ready = 1;
	up.multi = curl_multi_init();
	if (up.multi == NULL) {
		log_error("upstream: libcurl could not be initialised");
		return -1;
	}
	/* open first: the thread ends when it finds the queue closed and idle */
	workq_open(&up.q);
	if (pthread_create(&up.thread, NULL, upstream_thread, NULL) != 0) {
		workq_close(&up.q);
		log_error("upstream: cannot start the upstream thread");
		return -1;
	}
	up.running = 1;
	return 0;
}

void upstream_drain(void)
{
	/* calls queued from now on are refused */
	workq_close(&up.q);
	if (!up.running)
		return;
	curl_multi_wakeup(up.multi);
	pthread_join(up.thread, NULL);
	up.running = 0;
}

void upstream_stop(void)
{
	upstream_drain();
	while (up.n_idle > 0)
		curl_easy_cleanup(up.idle[--up.n_idle]);
	free(up.idle);
	up.idle = NULL;
	up.cap_idle = 0;
	if (up.multi != NULL)
		curl_multi_cleanup(up.multi);
	up.multi = NULL;
	if (up.curl_ready)
		curl_global_cleanup();
	up.curl_ready = 0;
}
