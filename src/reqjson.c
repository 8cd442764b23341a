/* Request JSON helpers. */
#include "reqjson.h"

#include <errno.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "problem.h"

int reqjson_only(struct request *req, json_t *obj, const char *const *allowed)
{
	const char *key;
	json_t *value;

	json_object_foreach(obj, key, value) {
		size_t i;
		for (i = 0; allowed[i] != NULL; i++)
			if (strcmp(key, allowed[i]) == 0)
				break;
		if (allowed[i] == NULL) {
			json_t *name = json_string(key);
			problem_reply(req, 400, "invalid_request", "unknown field %s",
				      name ? key : "(not UTF-8)");
			json_decref(name);
			return -1;
		}
	}
	return 0;
}

int reqjson_int(struct request *req, json_t *obj, const char *name, int required,
		int64_t min, int64_t max, int64_t *out, int *present)
{
	json_t *v = json_object_get(obj, name);

	*present = v != NULL;
	if (v == NULL) {
		if (!required)
			return 0;
		problem_reply(req, 400, "invalid_request", "field %s is required", name);
		return -1;
	}
	if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max) {
		problem_reply(req, 400, "invalid_request",
			      "field %s must be an integer from %" PRId64 " to %" PRId64,
			      name, min, max);
		return -1;
	}
	*out = json_integer_value(v);
	return 0;
}

int reqjson_string(struct request *req, json_t *obj, const char *name, int required,
		   size_t minlen, size_t maxlen, const char **out)
{
	json_t *v = json_object_get(obj, name);

	*out = NULL;
	if (v == NULL) {
		if (!required)
			return 0;
		problem_reply(req, 400, "invalid_request", "field %s is required", name);
		return -1;
	}
	if (!json_is_string(v) || json_string_length(v) < minlen ||
	    json_string_length(v) > maxlen || strlen(json_string_value(v)) != json_string_length(v)) {
		problem_reply(req, 400, "invalid_request",
			      "field %s must be a string of %zu to %zu bytes without NUL",
			      name, minlen, maxlen);
		return -1;
	}
	*out = json_string_value(v);
	return 0;
}

json_t *reqjson_time(int64_t unix_ms)
{
	char buf[40];
	struct tm tm;
	int64_t ms = ((unix_ms % 1000) + 1000) % 1000;
	time_t secs = (time_t)((unix_ms - ms) / 1000);

	gmtime_r(&secs, &tm);
	size_t n = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf + n, sizeof(buf) - n, ".%03dZ", (int)ms);
	return json_string(buf);
}

json_t *reqjson_response(const struct stored_response *r)
{
	json_t *headers = json_loads(r->sr_headers ? r->sr_headers : "{}", 0, NULL);
	json_t *out = json_pack("{s:i,s:o}", "status", r->sr_status,
				"headers", headers ? headers : json_object());

	if (out == NULL)
		return NULL;
	if (r->sr_is_json) {
		json_t *body = json_loadb((const char *)r->sr_body, r->sr_body_len,
					  JSON_DECODE_ANY, NULL);
		json_object_set_new(out, "body", body ? body : json_null());
	} else if (r->sr_body_len > 0) {
		size_t n = sodium_base64_encoded_len(r->sr_body_len, sodium_base64_VARIANT_ORIGINAL);
		char *b64 = malloc(n);
		if (b64 == NULL) {
			json_decref(out);
			return NULL;
		}
		sodium_bin2base64(b64, n, r->sr_body, r->sr_body_len, sodium_base64_VARIANT_ORIGINAL);
		json_object_set_new(out, "body_base64", json_string(b64));
		free(b64);
	} else {
		json_object_set_new(out, "body", json_null());
	}
	return out;
}

int reqjson_etag(const char *value, int64_t *out)
{
	char *end;

	while (*value == ' ')
		value++;
	if (value[0] != '"' || value[1] < '0' || value[1] > '9')
		return -1;
	if (value[1] == '0' && value[2] != '"')
		return -1; /* strong comparison is by characters: "07" is not "7" */
	errno = 0;
	long long v = strtoll(value + 1, &end, 10);
	if (errno != 0 || *end != '"' || v < 0)
		return -1;
	end++;
	while (*end == ' ')
		end++;
	if (*end != '\0')
		return -1;
	*out = v;
	return 0;
}

void reqjson_etag_format(int64_t version, char *out, size_t outlen)
{
	snprintf(out, outlen, "\"%" PRId64 "\"", version);
}

int reqjson_valid_name(const char *s)
{
	size_t n = strlen(s);

	return n >= 1 && n <= STORE_NAME_MAX &&
	       strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}
