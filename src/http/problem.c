/* Problem replies: every error idemd sends is built here. */
#include "problem.h"

#include "metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *problem_title(unsigned status)
{
	switch (status) {
	case 400:
		return "Bad Request";
	case 401:
		return "Unauthorized";
	case 403:
		return "Forbidden";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 408:
		return "Request Timeout";
	case 409:
		return "Conflict";
	case 410:
		return "Gone";
	case 412:
		return "Precondition Failed";
	case 413:
		return "Content Too Large";
	case 415:
		return "Unsupported Media Type";
	case 422:
		return "Unprocessable Content";
	case 428:
		return "Precondition Required";
	case 429:
		return "Too Many Requests";
	case 500:
		return "Internal Server Error";
	case 502:
		return "Bad Gateway";
	case 503:
		return "Service Unavailable";
	case 504:
		return "Gateway Timeout";
	default:
		return "Error";
	}
}

json_t *problem_document(unsigned status, const char *code, const char *detail)
{
	char type[128];

	snprintf(type, sizeof(type), "https://idemd.dev/problems/%s", code);
	return json_pack("{s:s,s:s,s:i,s:s,s:s}", "type", type, "title", problem_title(status),
			 "status", (int)status, "detail", detail, "code", code);
}

void problem_reply(struct request *req, unsigned status, const char *code, const char *fmt, ...)
{
	char detail[512];
	va_list ap;

	req->rep_code = code;
	va_start(ap, fmt);
	int full = vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	if (full >= (int)sizeof(detail)) {
		/* cut back to the start of a character that was cut in half */
		size_t n = strlen(detail), k = n;
		while (k > 0 && ((unsigned char)detail[k - 1] & 0xC0) == 0x80)
			k--;
		if (k > 0 && ((unsigned char)detail[k - 1] & 0x80) != 0)
			detail[k - 1] = '\0';
	}
	json_t *doc = problem_document(status, code, detail);
	if (doc == NULL) {
		/* detail was not valid UTF-8: fall back to a fixed text */
		doc = problem_document(status, code, "invalid input");
	}
	/* ends with a newline, like every JSON answer (http_json_text) */
	char *text = doc ? json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	size_t len = text ? strlen(text) : 0;
	char *line = text ? realloc(text, len + 2) : NULL;
	json_decref(doc);
	if (line == NULL) {
		free(text);
		http_reply_empty(req, 500);
		return;
	}
	line[len++] = '\n';
	http_reply_bytes(req, status, "application/problem+json", line, len);
	free(line);
}

/* Every 503 unavailable idemd answers is counted here, once
 * (idemd_db_unavailable_total), whichever path found the database away. */
void problem_unavailable(struct request *req)
{
	metrics_add(METRIC_DB_UNAVAILABLE, 1);
	problem_reply(req, 503, "unavailable", "the database is unavailable; retry shortly");
	http_set_header(req, "Retry-After", "1");
}
