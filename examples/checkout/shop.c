/*
 * checkout-shop: a small shop backend made idempotent by idemd's gateway
 * (see README.md beside this file). Standalone: it shares no code with idemd
 * and talks to it only over HTTP, as any shop would.
 *
 * Two listeners:
 *   public    GET /              the checkout page; asks idemd for a token
 *                                (POST /v1/tokens) as it renders it
 *             GET /idemd.js, /checkout.js, /checkout.css   the page's assets
 *             GET /healthz
 *   upstream  POST /orders       the upstream of idemd's gateway route: the
 *                                only way an order is made. Deduplicates by
 *                                the forwarded Idempotency-Key (a unique
 *                                constraint) and answers 201 with the order.
 *             GET /healthz
 * The public listener has no order endpoint at all; the upstream one belongs
 * on an address only idemd can reach. On top of that, an order is accepted
 * only for a token id this shop issued, for that token's subject.
 *
 * The price comes from the checkout row written when the page was rendered,
 * never from the browser.
 *
 * Threads: libmicrohttpd runs a thread per connection; handlers block on
 * PostgreSQL (a small pool) and on libcurl (token issue).
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#ifndef CHECKOUT_ASSETS_DIR
#define CHECKOUT_ASSETS_DIR "static"
#endif
#ifndef CHECKOUT_JS_FILE
#define CHECKOUT_JS_FILE "idemd.js"
#endif

#define SHOP_POOL_SIZE 4
#define SHOP_MAX_BODY 65536
#define SHOP_ITEM "Espresso beans, 1 kg"
#define SHOP_PRICE_CENTS 2400
#define SHOP_CURRENCY "EUR"
#define SHOP_COOKIE "shop_user"
#define SHOP_MAX_QUANTITY 10
#define SHOP_MAX_NAME 100

#if MHD_VERSION < 0x00097002
typedef int MHD_Result_t;
#else
typedef enum MHD_Result MHD_Result_t;
#endif

struct asset {
	const char *a_path;   /* URL path */
	const char *a_type;   /* Content-Type */
	char *a_data;
	size_t a_len;
};

static struct {
	const char *public_listen, *upstream_listen;
	char *database_url, *idemd_url, *gateway_url, *api_key, *operation;
	char gateway_origin[256];
	const char *assets_dir, *js_file;
	long order_delay_ms;
} opt = {
	.public_listen = "127.0.0.1:8090",
	.upstream_listen = "127.0.0.1:8091",
	.assets_dir = CHECKOUT_ASSETS_DIR,
	.js_file = CHECKOUT_JS_FILE,
};

static struct asset assets[] = {
	{ "/", "text/html; charset=utf-8", NULL, 0 },          /* the page template */
	{ "/checkout.js", "text/javascript; charset=utf-8", NULL, 0 },
	{ "/checkout.css", "text/css; charset=utf-8", NULL, 0 },
	{ "/idemd.js", "text/javascript; charset=utf-8", NULL, 0 },
};
#define ASSET_PAGE 0
#define N_ASSETS (sizeof(assets) / sizeof(assets[0]))

/* ---------------------------------------------------------------- logging */

/* One JSON object per line on stderr; LEVEL "info", "warn" or "error". */
static void shop_log(const char *level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void shop_log(const char *level, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	json_t *o = json_pack("{s:s, s:s}", "level", level, "msg", msg);
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	if (s != NULL)
		fprintf(stderr, "%s\n", s);
	free(s);
	json_decref(o);
}

/* ---------------------------------------------------------------- database */

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	PGconn *conns[SHOP_POOL_SIZE];
	int busy[SHOP_POOL_SIZE];
} pool = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

static const char schema_sql[] =
	"CREATE TABLE IF NOT EXISTS checkouts ("
	"  token_id text PRIMARY KEY,"           /* idemd's token id, hex */
	"  subject text NOT NULL,"
	"  item text NOT NULL,"
	"  unit_price_cents integer NOT NULL,"
	"  currency text NOT NULL,"
	"  version bigint,"                      /* orders:{subject} at render time */
	"  created_at timestamptz NOT NULL DEFAULT now());"
	"CREATE TABLE IF NOT EXISTS orders ("
	"  id bigserial PRIMARY KEY,"
	"  idempotency_key text NOT NULL UNIQUE," /* one order per token */
	"  subject text NOT NULL,"
	"  item text NOT NULL,"
	"  quantity integer NOT NULL CHECK (quantity BETWEEN 1 AND 10),"
	"  amount_cents integer NOT NULL,"
	"  currency text NOT NULL,"
	"  name text NOT NULL,"
	"  created_at timestamptz NOT NULL DEFAULT now());"
	"CREATE INDEX IF NOT EXISTS orders_subject ON orders (subject);";

static int db_open(void)
{
	for (int i = 0; i < SHOP_POOL_SIZE; i++) {
		pool.conns[i] = PQconnectdb(opt.database_url);
		if (PQstatus(pool.conns[i]) != CONNECTION_OK) {
			shop_log("error", "database: %s", PQerrorMessage(pool.conns[i]));
			return -1;
		}
	}
	PGresult *r = PQexec(pool.conns[0], schema_sql);
	int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
	if (!ok)
		shop_log("error", "database: creating the tables: %s", PQerrorMessage(pool.conns[0]));
	PQclear(r);
	return ok ? 0 : -1;
}

static void db_close(void)
{
	for (int i = 0; i < SHOP_POOL_SIZE; i++) {
		PQfinish(pool.conns[i]);
		pool.conns[i] = NULL;
	}
}

/* A pooled connection, reset when it broke; give it back with db_put(). */
static PGconn *db_get(void)
{
	int i;

	pthread_mutex_lock(&pool.mu);
	for (;;) {
		for (i = 0; i < SHOP_POOL_SIZE && pool.busy[i]; i++)
			;
		if (i < SHOP_POOL_SIZE)
			break;
		pthread_cond_wait(&pool.cv, &pool.mu);
	}
	pool.busy[i] = 1;
	pthread_mutex_unlock(&pool.mu);
	if (PQstatus(pool.conns[i]) != CONNECTION_OK)
		PQreset(pool.conns[i]);
	return pool.conns[i];
}

static void db_put(PGconn *c)
{
	pthread_mutex_lock(&pool.mu);
	for (int i = 0; i < SHOP_POOL_SIZE; i++)
		if (pool.conns[i] == c)
			pool.busy[i] = 0;
	pthread_cond_signal(&pool.cv);
	pthread_mutex_unlock(&pool.mu);
}

/* Runs SQL with N text parameters; the result (free with PQclear), or NULL
 * after logging when it failed. */
static PGresult *db_exec(PGconn *c, const char *sql, int n, const char *const *params)
{
	PGresult *r = PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0);
	ExecStatusType st = PQresultStatus(r);

	if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
		shop_log("error", "database: %s", PQerrorMessage(c));
		PQclear(r);
		return NULL;
	}
	return r;
}

/* ---------------------------------------------------------------- buffers */

struct buf {
	char *data;
	size_t len, cap;
	int failed;
};

static void buf_add(struct buf *b, const char *s, size_t n)
{
	if (b->failed)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 1024;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *p = realloc(b->data, cap);
		if (p == NULL) {
			b->failed = 1;
			return;
		}
		b->data = p;
		b->cap = cap;
	}
	memcpy(b->data + b->len, s, n);
	b->len += n;
	b->data[b->len] = '\0';
}

static void buf_str(struct buf *b, const char *s)
{
	buf_add(b, s, strlen(s));
}

static void buf_html(struct buf *b, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '&': buf_str(b, "&amp;"); break;
		case '<': buf_str(b, "&lt;"); break;
		case '>': buf_str(b, "&gt;"); break;
		case '"': buf_str(b, "&quot;"); break;
		case '\'': buf_str(b, "&#39;"); break;
		default: buf_add(b, s, 1);
		}
	}
}

/* ---------------------------------------------------------------- requests */

struct req {
	const char *listener;     /* "public" or "upstream" */
	char method[16];
	char path[128];
	struct timespec start;
	struct buf body;
	int too_big;
	unsigned status;
	long long order_id;       /* for the log: the order answered, if any */
	int duplicate;            /* ... and whether it already existed */
};

static double elapsed_ms(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct req *r = *con_cls;

	(void)cls;
	(void)c;
	if (r == NULL)
		return;
	json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:i, s:f}", "level", "info",
			      "listener", r->listener, "method", r->method, "path", r->path,
			      "status", (int)r->status, "ms", elapsed_ms(&r->start));
	if (o != NULL && r->order_id > 0) {
		json_object_set_new(o, "order_id", json_integer(r->order_id));
		json_object_set_new(o, "duplicate", json_boolean(r->duplicate));
	}
	if (o != NULL && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
		json_object_set_new(o, "aborted", json_true());
	char *s = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(4)) : NULL;
	if (s != NULL)
		fprintf(stderr, "%s\n", s);
	free(s);
	json_decref(o);
	free(r->body.data);
	free(r);
	*con_cls = NULL;
}

/* Queues a reply of STATUS with BODY (copied) and the NULL-terminated
 * name/value pairs that follow. */
static MHD_Result_t reply(struct MHD_Connection *c, struct req *r, unsigned status,
			  const char *type, const char *body, size_t len, ...)
{
	struct MHD_Response *resp =
		MHD_create_response_from_buffer(len, (void *)(uintptr_t)body, MHD_RESPMEM_MUST_COPY);
	va_list ap;
	const char *name;

	if (resp == NULL)
		return MHD_NO;
	if (type != NULL)
		MHD_add_response_header(resp, "Content-Type", type);
	MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	va_start(ap, len);
	while ((name = va_arg(ap, const char *)) != NULL) {
		const char *value = va_arg(ap, const char *);
		MHD_add_response_header(resp, name, value);
	}
	va_end(ap);
	MHD_Result_t ret = MHD_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	r->status = status;
	return ret;
}

/* An application/problem+json reply (RFC 9457). */
static MHD_Result_t reply_problem(struct MHD_Connection *c, struct req *r, unsigned status,
				  const char *code, const char *detail)
{
	json_t *o = json_pack("{s:s, s:s, s:i, s:s, s:s}", "type", "about:blank", "title", code,
			      "status", (int)status, "detail", detail, "code", code);
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	MHD_Result_t ret;

	json_decref(o);
	if (s == NULL)
		return MHD_NO;
	if (status == 503)
		ret = reply(c, r, status, "application/problem+json", s, strlen(s),
			    "Retry-After", "1", NULL);
	else
		ret = reply(c, r, status, "application/problem+json", s, strlen(s), NULL);
	free(s);
	return ret;
}

/* ---------------------------------------------------------------- idemd */

static size_t on_curl_body(char *data, size_t size, size_t n, void *arg)
{
	struct buf *b = arg;

	if (b->len + size * n > SHOP_MAX_BODY)
		return 0;
	buf_add(b, data, size * n);
	return b->failed ? 0 : size * n;
}

struct issued {
	char token[512];
	char id[65];
	long long version;        /* -1 when the operation guards no counter */
};

/* Asks idemd for a token for SUBJECT (POST /v1/tokens). 0, or -1 after
 * logging. */
static int idemd_issue(const char *subject, struct issued *out)
{
	char url[1024], auth[600];
	struct buf resp = { 0 };
	struct curl_slist *h = NULL;
	long status = 0;
	int ret = -1;
	json_t *req = json_pack("{s:s, s:s}", "operation", opt.operation, "subject", subject);
	char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
	CURL *curl = curl_easy_init();

	json_decref(req);
	snprintf(url, sizeof(url), "%s/v1/tokens", opt.idemd_url);
	snprintf(auth, sizeof(auth), "Authorization: Bearer %s", opt.api_key);
	h = curl_slist_append(h, auth);
	struct curl_slist *h2 = h ? curl_slist_append(h, "Content-Type: application/json") : NULL;
	if (curl == NULL || body == NULL || h2 == NULL)
		goto done;
	h = h2;
	curl_easy_setopt(curl, CURLOPT_URL, url);
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_curl_body);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, &resp);
	curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, 2000L);
	curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 5000L);
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	CURLcode rc = curl_easy_perform(curl);
	if (rc != CURLE_OK) {
		shop_log("warn", "idemd: POST /v1/tokens: %s", curl_easy_strerror(rc));
		goto done;
	}
	curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
	json_t *j = resp.data ? json_loads(resp.data, 0, NULL) : NULL;
	const char *token = json_string_value(json_object_get(j, "token"));
	const char *id = json_string_value(json_object_get(j, "id"));
	json_t *v = json_object_get(j, "version");
	if (status != 201 || token == NULL || id == NULL || strlen(token) >= sizeof(out->token) ||
	    strlen(id) >= sizeof(out->id)) {
		shop_log("warn", "idemd: POST /v1/tokens answered %ld: %.300s", status,
			 resp.data ? resp.data : "");
	} else {
		snprintf(out->token, sizeof(out->token), "%s", token);
		snprintf(out->id, sizeof(out->id), "%s", id);
		out->version = json_is_integer(v) ? (long long)json_integer_value(v) : -1;
		ret = 0;
	}
	json_decref(j);
done:
	curl_easy_cleanup(curl);
	curl_slist_free_all(h);
	free(body);
	free(resp.data);
	return ret;
}

/* ---------------------------------------------------------------- page */

static int valid_subject(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > 64)
		return 0;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_' && *s != '.')
			return 0;
	return 1;
}

static void new_subject(char out[32])
{
	unsigned char rnd[6];

	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
		struct timespec t;
		clock_gettime(CLOCK_REALTIME, &t);
		memcpy(rnd, &t.tv_nsec, sizeof(rnd) < sizeof(t.tv_nsec) ? sizeof(rnd) : sizeof(t.tv_nsec));
	}
	snprintf(out, 32, "u-%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3], rnd[4],
		 rnd[5]);
}

static void format_money(char *out, size_t len, long long cents)
{
	snprintf(out, len, "\xe2\x82\xac%lld.%02lld", cents / 100, cents % 100);
}

/* Fills the page template: every {{name}} of VARS (pairs, NULL-terminated)
 * replaced by its HTML-escaped value. */
static void render(struct buf *out, const char *tpl, const char *const *vars)
{
	const char *p = tpl;

	while (*p) {
		const char *open = strstr(p, "{{");
		if (open == NULL) {
			buf_str(out, p);
			return;
		}
		buf_add(out, p, (size_t)(open - p));
		const char *close = strstr(open + 2, "}}");
		if (close == NULL) {
			buf_str(out, open);
			return;
		}
		size_t n = (size_t)(close - open - 2);
		const char *value = NULL;
		for (const char *const *v = vars; *v; v += 2)
			if (strlen(v[0]) == n && strncmp(v[0], open + 2, n) == 0)
				value = v[1];
		if (value != NULL)
			buf_html(out, value);
		else
			buf_add(out, open, (size_t)(close + 2 - open));
		p = close + 2;
	}
}

static MHD_Result_t page_unavailable(struct MHD_Connection *c, struct req *r, const char *why)
{
	struct buf b = { 0 };

	buf_str(&b, "<!doctype html><meta charset=utf-8><title>Checkout unavailable</title>"
		    "<p>The checkout is unavailable right now (");
	buf_html(&b, why);
	buf_str(&b, "). Please try again in a moment.</p>\n");
	MHD_Result_t ret = b.failed ? MHD_NO :
		reply(c, r, 503, "text/html; charset=utf-8", b.data, b.len, "Retry-After", "5",
		      "Cache-Control", "no-store", NULL);
	free(b.data);
	return ret;
}

static MHD_Result_t handle_page(struct MHD_Connection *c, struct req *r)
{
	const char *cookie = MHD_lookup_connection_value(c, MHD_COOKIE_KIND, SHOP_COOKIE);
	char subject[65], set_cookie[160], price[32], count[32], version[32];
	struct issued tok;
	struct buf page = { 0 };
	PGresult *res;
	MHD_Result_t ret;

	set_cookie[0] = '\0';
	if (valid_subject(cookie)) {
		snprintf(subject, sizeof(subject), "%s", cookie);
	} else {
		/* a demo session: a real shop takes the subject from its login */
		new_subject(subject);
		snprintf(set_cookie, sizeof(set_cookie),
			 SHOP_COOKIE "=%s; Path=/; HttpOnly; SameSite=Lax", subject);
	}
	if (idemd_issue(subject, &tok) < 0)
		return page_unavailable(c, r, "no token from idemd");

	snprintf(version, sizeof(version), "%lld", tok.version);
	snprintf(price, sizeof(price), "%d", SHOP_PRICE_CENTS);
	PGconn *db = db_get();
	const char *ins[] = { tok.id, subject, SHOP_ITEM, price, SHOP_CURRENCY,
			      tok.version >= 0 ? version : NULL };
	res = db_exec(db, "INSERT INTO checkouts (token_id, subject, item, unit_price_cents, "
			  "currency, version) VALUES ($1, $2, $3, $4, $5, $6)", 6, ins);
	if (res == NULL) {
		db_put(db);
		return page_unavailable(c, r, "database unavailable");
	}
	PQclear(res);
	const char *cnt[] = { subject };
	res = db_exec(db, "SELECT count(*) FROM orders WHERE subject = $1", 1, cnt);
	db_put(db);
	if (res == NULL)
		return page_unavailable(c, r, "database unavailable");
	snprintf(count, sizeof(count), "%s", PQgetvalue(res, 0, 0));
	PQclear(res);

	char orders_url[1100], unit[32];
	snprintf(orders_url, sizeof(orders_url), "%s/orders", opt.gateway_url);
	format_money(unit, sizeof(unit), SHOP_PRICE_CENTS);
	const char *vars[] = {
		"subject", subject,
		"token", tok.token,
		"orders_url", orders_url,
		"item", SHOP_ITEM,
		"unit_price", unit,
		"unit_price_cents", price,
		"currency", SHOP_CURRENCY,
		"version", tok.version >= 0 ? version : "none",
		"orders_count", count,
		NULL,
	};
	render(&page, assets[ASSET_PAGE].a_data, vars);
	if (page.failed) {
		free(page.data);
		return MHD_NO;
	}
	char csp[1024];
	snprintf(csp, sizeof(csp),
		 "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
		 "connect-src 'self' %s; form-action %s; base-uri 'none'; frame-ancestors 'none'",
		 opt.gateway_origin, opt.gateway_origin);
	if (set_cookie[0] != '\0')
		ret = reply(c, r, 200, assets[ASSET_PAGE].a_type, page.data, page.len,
			    "Cache-Control", "no-store", "Content-Security-Policy", csp,
			    "Set-Cookie", set_cookie, NULL);
	else
		ret = reply(c, r, 200, assets[ASSET_PAGE].a_type, page.data, page.len,
			    "Cache-Control", "no-store", "Content-Security-Policy", csp, NULL);
	free(page.data);
	return ret;
}

/* ---------------------------------------------------------------- orders */

static int is_token_id(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n != 32)
		return 0;
	for (; *s; s++)
		if (!isdigit((unsigned char)*s) && !(*s >= 'a' && *s <= 'f'))
			return 0;
	return 1;
}

/* The quantity field: an integer or a string of digits, 1..10; 0 if bad. */
static int parse_quantity(json_t *v)
{
	long long q = 0;

	if (json_is_integer(v)) {
		q = json_integer_value(v);
	} else if (json_is_string(v)) {
		const char *s = json_string_value(v);
		if (*s == '\0' || strlen(s) > 3)
			return 0;
		for (const char *p = s; *p; p++) {
			if (!isdigit((unsigned char)*p))
				return 0;
			q = q * 10 + (*p - '0');
		}
	}
	return q >= 1 && q <= SHOP_MAX_QUANTITY ? (int)q : 0;
}

static MHD_Result_t reply_order(struct MHD_Connection *c, struct req *r, PGresult *res)
{
	json_t *o = json_pack("{s:I, s:s, s:I, s:I, s:s, s:s, s:s}",
			      "order_id", (json_int_t)strtoll(PQgetvalue(res, 0, 0), NULL, 10),
			      "item", PQgetvalue(res, 0, 1),
			      "quantity", (json_int_t)strtoll(PQgetvalue(res, 0, 2), NULL, 10),
			      "amount_cents", (json_int_t)strtoll(PQgetvalue(res, 0, 3), NULL, 10),
			      "currency", PQgetvalue(res, 0, 4),
			      "name", PQgetvalue(res, 0, 5),
			      "created_at", PQgetvalue(res, 0, 6));
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	char location[64];

	r->order_id = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	snprintf(location, sizeof(location), "/orders/%lld", r->order_id);
	json_decref(o);
	if (s == NULL)
		return MHD_NO;
	MHD_Result_t ret = reply(c, r, 201, "application/json", s, strlen(s), "Location", location,
				 "Cache-Control", "no-store", NULL);
	free(s);
	return ret;
}

#define ORDER_COLUMNS "id, item, quantity, amount_cents, currency, name, " \
	"to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"

/* POST /orders on the upstream listener: reached only through idemd. */
static MHD_Result_t handle_order(struct MHD_Connection *c, struct req *r)
{
	const char *key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Idempotency-Key");
	const char *subject = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Idempotency-Subject");
	const char *ctype = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
	char quantity[16], amount[32];
	MHD_Result_t ret;

	if (!is_token_id(key) || subject == NULL)
		return reply_problem(c, r, 400, "not_through_gateway",
				     "orders are accepted only through the idemd gateway "
				     "(Idempotency-Key and Idempotency-Subject missing)");
	if (ctype == NULL || strncasecmp(ctype, "application/json", 16) != 0)
		return reply_problem(c, r, 415, "unsupported_media_type", "send application/json");
	if (r->too_big)
		return reply_problem(c, r, 413, "payload_too_large", "the order is too large");
	json_t *body = json_loadb(r->body.data ? r->body.data : "", r->body.len, 0, NULL);
	const char *name = json_string_value(json_object_get(body, "name"));
	int q = parse_quantity(json_object_get(body, "quantity"));
	size_t name_len = name ? strlen(name) : 0;
	if (!json_is_object(body) || name_len == 0 || name_len > SHOP_MAX_NAME || q == 0) {
		json_decref(body);
		return reply_problem(c, r, 400, "invalid_order",
				     "the order needs a name (1 to 100 characters) and a quantity "
				     "from 1 to 10");
	}
	if (opt.order_delay_ms > 0) /* the example's stand-in for a slow payment provider */
		usleep((useconds_t)opt.order_delay_ms * 1000);

	PGconn *db = db_get();
	const char *sel[] = { key };
	PGresult *res = db_exec(db, "SELECT subject, item, unit_price_cents, currency "
				    "FROM checkouts WHERE token_id = $1", 1, sel);
	if (res == NULL) {
		ret = reply_problem(c, r, 503, "unavailable", "the database is unavailable");
		goto done;
	}
	if (PQntuples(res) == 0) {
		ret = reply_problem(c, r, 403, "unknown_checkout",
				    "this Idempotency-Key is not a checkout of this shop");
		goto done;
	}
	if (strcmp(PQgetvalue(res, 0, 0), subject) != 0) {
		ret = reply_problem(c, r, 403, "subject_mismatch",
				    "the checkout belongs to another user");
		goto done;
	}
	snprintf(quantity, sizeof(quantity), "%d", q);
	snprintf(amount, sizeof(amount), "%lld", strtoll(PQgetvalue(res, 0, 2), NULL, 10) * q);
	const char *ins[] = { key, subject, PQgetvalue(res, 0, 1), quantity, amount,
			      PQgetvalue(res, 0, 3), name };
	PGresult *o = db_exec(db, "INSERT INTO orders (idempotency_key, subject, item, quantity, "
				  "amount_cents, currency, name) VALUES ($1, $2, $3, $4, $5, $6, $7) "
				  "ON CONFLICT (idempotency_key) DO NOTHING RETURNING " ORDER_COLUMNS,
			      7, ins);
	PQclear(res);
	res = o;
	if (res != NULL && PQntuples(res) == 0) {
		/* delivered twice (a retry after a lost answer): the same order again */
		PQclear(res);
		res = db_exec(db, "SELECT " ORDER_COLUMNS " FROM orders WHERE idempotency_key = $1",
			      1, sel);
		r->duplicate = 1;
	}
	if (res == NULL || PQntuples(res) != 1)
		ret = reply_problem(c, r, 503, "unavailable", "the database is unavailable");
	else
		ret = reply_order(c, r, res);
done:
	PQclear(res);
	db_put(db);
	json_decref(body);
	return ret;
}

/* ---------------------------------------------------------------- dispatch */

static MHD_Result_t on_request(void *cls, struct MHD_Connection *c, const char *url,
			       const char *method, const char *version, const char *upload,
			       size_t *upload_size, void **con_cls)
{
	const char *listener = cls;
	struct req *r = *con_cls;

	(void)version;
	if (r == NULL) {
		r = calloc(1, sizeof(*r));
		if (r == NULL)
			return MHD_NO;
		r->listener = listener;
		snprintf(r->method, sizeof(r->method), "%s", method);
		snprintf(r->path, sizeof(r->path), "%s", url);
		clock_gettime(CLOCK_MONOTONIC, &r->start);
		*con_cls = r;
		return MHD_YES;
	}
	if (*upload_size > 0) {
		if (r->body.len + *upload_size > SHOP_MAX_BODY)
			r->too_big = 1;
		else
			buf_add(&r->body, upload, *upload_size);
		*upload_size = 0;
		return MHD_YES;
	}
	int get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;

	if (strcmp(url, "/healthz") == 0 && get)
		return reply(c, r, 200, "text/plain", "ok\n", 3, NULL);
	if (strcmp(listener, "upstream") == 0) {
		if (strcmp(url, "/orders") == 0 && strcmp(method, "POST") == 0)
			return handle_order(c, r);
		return reply_problem(c, r, 404, "not_found", "no such path");
	}
	if (strcmp(url, "/") == 0 && get)
		return handle_page(c, r);
	for (size_t i = 1; i < N_ASSETS; i++)
		if (strcmp(url, assets[i].a_path) == 0 && get)
			return reply(c, r, 200, assets[i].a_type, assets[i].a_data, assets[i].a_len,
				     "Cache-Control", "no-cache", NULL);
	if (strcmp(url, "/orders") == 0)
		return reply_problem(c, r, 404, "not_found",
				     "orders are accepted only through the idemd gateway");
	return reply_problem(c, r, 404, "not_found", "no such path");
}

/* ---------------------------------------------------------------- start */

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	struct buf b = { 0 };
	char chunk[8192];
	size_t n;

	if (f == NULL)
		return NULL;
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		buf_add(&b, chunk, n);
	if (ferror(f) || b.failed) {
		fclose(f);
		free(b.data);
		return NULL;
	}
	fclose(f);
	if (b.data == NULL)
		buf_str(&b, "");
	if (len)
		*len = b.len;
	return b.data;
}

static int load_assets(void)
{
	static const char *const files[] = { "index.html", "checkout.js", "checkout.css", NULL };
	char path[4096];

	for (size_t i = 0; i < N_ASSETS; i++) {
		if (files[i] != NULL)
			snprintf(path, sizeof(path), "%s/%s", opt.assets_dir, files[i]);
		else
			snprintf(path, sizeof(path), "%s", opt.js_file);
		assets[i].a_data = read_file(path, &assets[i].a_len);
		if (assets[i].a_data == NULL) {
			shop_log("error", "cannot read %s: %s", path, strerror(errno));
			return -1;
		}
	}
	return 0;
}

static int parse_listen(const char *s, struct sockaddr_in *sa)
{
	const char *colon = strrchr(s, ':');
	char host[64];
	char *end;

	if (colon == NULL || (size_t)(colon - s) >= sizeof(host))
		return -1;
	memcpy(host, s, (size_t)(colon - s));
	host[colon - s] = '\0';
	long port = strtol(colon + 1, &end, 10);
	if (*end != '\0' || port < 1 || port > 65535)
		return -1;
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons((uint16_t)port);
	if (host[0] == '\0' || strcmp(host, "localhost") == 0)
		snprintf(host, sizeof(host), "127.0.0.1");
	return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -1;
}

static struct MHD_Daemon *start_listener(const char *listen, const char *name)
{
	struct sockaddr_in sa;

	if (parse_listen(listen, &sa) < 0) {
		shop_log("error", "bad %s listen address %s (want IPv4:PORT)", name, listen);
		return NULL;
	}
	struct MHD_Daemon *d = MHD_start_daemon(
		MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG,
		0, NULL, NULL, on_request, (void *)(uintptr_t)name,
		MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
		MHD_OPTION_CONNECTION_LIMIT, (unsigned)256,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30,
		MHD_OPTION_END);
	if (d == NULL)
		shop_log("error", "cannot listen on %s (%s)", listen, name);
	return d;
}

/* The scheme://host[:port] of URL, for the Content-Security-Policy. */
static int url_origin(const char *url, char *out, size_t len)
{
	const char *p = strstr(url, "://");

	if (p == NULL || (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0))
		return -1;
	size_t n = (size_t)(p + 3 - url) + strcspn(p + 3, "/?#");
	if (n >= len)
		return -1;
	memcpy(out, url, n);
	out[n] = '\0';
	return 0;
}

static char *trimmed(char *s)
{
	size_t n = strlen(s);

	while (n > 0 && isspace((unsigned char)s[n - 1]))
		s[--n] = '\0';
	return s;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: checkout-shop --database-url CONNINFO --api-key-file FILE [options]\n"
		"  --listen HOST:PORT           the page (default 127.0.0.1:8090)\n"
		"  --upstream-listen HOST:PORT  POST /orders, for idemd only (default 127.0.0.1:8091)\n"
		"  --idemd-url URL              idemd's API, to issue tokens (default http://127.0.0.1:8080)\n"
		"  --gateway-url URL            where the page submits (default: --idemd-url)\n"
		"  --operation NAME             idemd operation (default order.create)\n"
		"  --assets DIR                 index.html, checkout.js, checkout.css\n"
		"  --js FILE                    clients/node/src/browser.js\n"
		"  --order-delay-ms N           pretend payments take N ms (default 0)\n"
		"Environment: SHOP_DATABASE_URL, SHOP_IDEMD_API_KEY stand in for the first two.\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "upstream-listen", required_argument, NULL, 'u' },
		{ "database-url", required_argument, NULL, 'd' },
		{ "idemd-url", required_argument, NULL, 'i' },
		{ "gateway-url", required_argument, NULL, 'g' },
		{ "api-key-file", required_argument, NULL, 'k' },
		{ "operation", required_argument, NULL, 'o' },
		{ "assets", required_argument, NULL, 'a' },
		{ "js", required_argument, NULL, 'j' },
		{ "order-delay-ms", required_argument, NULL, 'D' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *key_file = NULL;
	struct MHD_Daemon *pub = NULL, *up = NULL;
	sigset_t sigs;
	int ch, sig, status = 1;

	while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (ch) {
		case 'l': opt.public_listen = optarg; break;
		case 'u': opt.upstream_listen = optarg; break;
		case 'd': free(opt.database_url); opt.database_url = strdup(optarg); break;
		case 'i': free(opt.idemd_url); opt.idemd_url = strdup(optarg); break;
		case 'g': free(opt.gateway_url); opt.gateway_url = strdup(optarg); break;
		case 'k': key_file = optarg; break;
		case 'o': free(opt.operation); opt.operation = strdup(optarg); break;
		case 'a': opt.assets_dir = optarg; break;
		case 'j': opt.js_file = optarg; break;
		case 'D': opt.order_delay_ms = strtol(optarg, NULL, 10); break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (opt.database_url == NULL && getenv("SHOP_DATABASE_URL"))
		opt.database_url = strdup(getenv("SHOP_DATABASE_URL"));
	if (key_file != NULL) {
		opt.api_key = read_file(key_file, NULL);
		if (opt.api_key == NULL) {
			shop_log("error", "cannot read %s: %s", key_file, strerror(errno));
			goto done;
		}
		trimmed(opt.api_key);
	} else if (getenv("SHOP_IDEMD_API_KEY")) {
		opt.api_key = strdup(getenv("SHOP_IDEMD_API_KEY"));
	}
	if (opt.idemd_url == NULL)
		opt.idemd_url = strdup("http://127.0.0.1:8080");
	if (opt.gateway_url == NULL)
		opt.gateway_url = opt.idemd_url ? strdup(opt.idemd_url) : NULL;
	if (opt.operation == NULL)
		opt.operation = strdup("order.create");
	if (opt.database_url == NULL || opt.api_key == NULL || opt.api_key[0] == '\0') {
		usage(stderr);
		status = 2;
		goto done;
	}
	if (opt.idemd_url == NULL || opt.gateway_url == NULL || opt.operation == NULL)
		goto done;
	size_t gl = strlen(opt.gateway_url);
	while (gl > 0 && opt.gateway_url[gl - 1] == '/')
		opt.gateway_url[--gl] = '\0';
	gl = strlen(opt.idemd_url);
	while (gl > 0 && opt.idemd_url[gl - 1] == '/')
		opt.idemd_url[--gl] = '\0';
	if (url_origin(opt.gateway_url, opt.gateway_origin, sizeof(opt.gateway_origin)) < 0) {
		shop_log("error", "bad --gateway-url %s", opt.gateway_url);
		status = 2;
		goto done;
	}
	if (load_assets() < 0)
		goto done;
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		goto done;
	if (db_open() < 0)
		goto done_curl;

	/* handle SIGINT and SIGTERM in this thread only */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	pub = start_listener(opt.public_listen, "public");
	up = pub ? start_listener(opt.upstream_listen, "upstream") : NULL;
	if (pub == NULL || up == NULL)
		goto done_db;
	shop_log("info", "checkout-shop: page on http://%s/, orders (for idemd) on "
		 "http://%s/orders, submitting to %s/orders", opt.public_listen,
		 opt.upstream_listen, opt.gateway_url);
	while (sigwait(&sigs, &sig) != 0)
		;
	shop_log("info", "checkout-shop: stopping (signal %d)", sig);
	status = 0;
done_db:
	if (up)
		MHD_stop_daemon(up);
	if (pub)
		MHD_stop_daemon(pub);
	db_close();
done_curl:
	curl_global_cleanup();
done:
	for (size_t i = 0; i < N_ASSETS; i++)
		free(assets[i].a_data);
	if (opt.api_key)
		memset(opt.api_key, 0, strlen(opt.api_key));
	free(opt.api_key);
	free(opt.database_url);
	free(opt.idemd_url);
	free(opt.gateway_url);
	free(opt.operation);
	return status;
}
