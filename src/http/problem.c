/* Problem answers: every error idemd sends is built here, once per
 * request, from the problem a check recorded (request_fail). */
#include "problem.h"

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

void problem_answer(struct request *req)
{
	const struct request_problem *p = &req->rep_problem;

	if (req->rep_response != NULL || p->rp_status == 0)
		return;
	struct request_problem found = *p;
	json_t *doc = problem_document(found.rp_status, found.rp_code, found.rp_detail);
	if (doc == NULL) {
		/* detail was not valid UTF-8: fall back to a fixed text */
		doc = problem_document(found.rp_status, found.rp_code, "invalid input");
	}
	size_t len;
	char *line = http_json_text(doc, JSON_COMPACT | JSON_PRESERVE_ORDER, &len);
	json_decref(doc);
	if (line == NULL) {
		http_reply_empty(req, 500);
		return;
	}
	http_reply_take(req, found.rp_status, "application/problem+json", line, len);
	req->rep_code = found.rp_code;
	for (int i = 0; i < found.rp_n_headers; i++)
		http_set_header(req, found.rp_name[i], found.rp_value[i]);
}
