/* Problem answers: every error idemd sends is built here, once per
 * request, from the problem a check recorded (request_fail). */
#include "problem.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The reason phrase of each status idemd answers with. */
static const struct {
	unsigned status;
	const char *title;
} problem_titles[] = {
	{ 400, "Bad Request" },
	{ 401, "Unauthorized" },
	{ 403, "Forbidden" },
	{ 404, "Not Found" },
	{ 405, "Method Not Allowed" },
	{ 408, "Request Timeout" },
	{ 409, "Conflict" },
	{ 410, "Gone" },
	{ 412, "Precondition Failed" },
	{ 413, "Content Too Large" },
	{ 415, "Unsupported Media Type" },
	{ 422, "Unprocessable Content" },
	{ 428, "Precondition Required" },
	{ 429, "Too Many Requests" },
	{ 500, "Internal Server Error" },
	{ 502, "Bad Gateway" },
	{ 503, "Service Unavailable" },
	{ 504, "Gateway Timeout" },
};

const char *problem_title(unsigned status)
{
	for (size_t i = 0; i < IDEMD_ARRAY_LEN(problem_titles); i++)
		if (problem_titles[i].status == status)
			return problem_titles[i].title;
	return "Error";
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
