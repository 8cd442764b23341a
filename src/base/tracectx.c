/* W3C Trace Context: parsing a traceparent, starting a trace, idemd's
 * span. https://www.w3.org/TR/trace-context/ section 3.2. */
#include "tracectx.h"

#include <string.h>

#include "randpool.h"

static int tracectx_hex(const char *s, size_t n, int nonzero)
{
	int any = 0;

	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return 0;
		any |= c != '0';
	}
	return !nonzero || any;
}

static void tracectx_random(char *out, size_t bytes)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char raw[16];

	do {
		randpool_buf(raw, bytes);
	} while (memcmp(raw, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", bytes) == 0);
	for (size_t i = 0; i < bytes; i++) {
		out[2 * i] = hex[raw[i] >> 4];
		out[2 * i + 1] = hex[raw[i] & 15];
	}
	out[2 * bytes] = '\0';
}

/* Whether H is a traceparent idemd can join: 00 exactly 55 long; a later
 * version at least 55 long with '-' after the flags if longer; never ff. */
static int tracectx_valid(const char *h)
{
	size_t n = strlen(h);

	if (n < TRACECTX_HEADER_LEN || !tracectx_hex(h, 2, 0) || strncmp(h, "ff", 2) == 0)
		return 0;
	if (strncmp(h, "00", 2) == 0 ? n != TRACECTX_HEADER_LEN
				     : (n > TRACECTX_HEADER_LEN && h[TRACECTX_HEADER_LEN] != '-'))
		return 0;
	return h[2] == '-' && h[35] == '-' && h[52] == '-' && tracectx_hex(h + 3, 32, 1) &&
	       tracectx_hex(h + 36, 16, 1) && tracectx_hex(h + 53, 2, 0);
}

void tracectx_begin(struct tracectx *tc, const char *header)
{
	if (header != NULL && tracectx_valid(header)) {
		memcpy(tc->tc_trace_id, header + 3, 32);
		tc->tc_trace_id[32] = '\0';
		memcpy(tc->tc_flags, header + 53, 2);
		tc->tc_flags[2] = '\0';
	} else {
		tracectx_random(tc->tc_trace_id, 16);
		memcpy(tc->tc_flags, "00", 3);
	}
	tracectx_random(tc->tc_span_id, 8);
}

void tracectx_format(const struct tracectx *tc, char out[TRACECTX_HEADER_LEN + 1])
{
	/* fixed widths: copied, not formatted (on every answer's path) */
	memcpy(out, "00-", 3);
	memcpy(out + 3, tc->tc_trace_id, 32);
	out[35] = '-';
	memcpy(out + 36, tc->tc_span_id, 16);
	out[52] = '-';
	memcpy(out + 53, tc->tc_flags, 2);
	out[TRACECTX_HEADER_LEN] = '\0';
}
