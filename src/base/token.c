/* Token codec: binary layout, base64url encoding and the BLAKE2b MAC. */
#include "token.h"

#include <string.h>

#include <sodium.h>

#define TOKEN_FORMAT_VERSION 1
#define TOKEN_FLAG_VERSION 0x01
#define TOKEN_TAG_BYTES 16
#define TOKEN_B64 sodium_base64_VARIANT_URLSAFE_NO_PADDING
/* ver, flags, key_id, tenant_id, operation_id, id, issued_at, expires_at */
#define TOKEN_HEADER_BYTES (1 + 1 + 4 + 4 + 4 + TOKEN_ID_BYTES + 4 + 4)
#define TOKEN_MIN_BYTES (TOKEN_HEADER_BYTES + 1 + 1 + TOKEN_TAG_BYTES)
#define TOKEN_MAX_BYTES (TOKEN_HEADER_BYTES + 8 + 1 + TOKEN_SUBJECT_MAX + TOKEN_TAG_BYTES)
/* Room for anything TOKEN_MAX_CHARS base64 characters can decode to. */
#define TOKEN_DECODE_BYTES (TOKEN_MAX_CHARS / 4 * 3)

static uint8_t *put32(uint8_t *p, uint32_t v);
static const uint8_t *get32(const uint8_t *p, uint32_t *v);
static int token_b64_char(char c);
static int token_b64url_tail(const unsigned char *u, size_t rest, uint8_t *out, size_t *k);
static int token_unquote(const char *p, const char *end, char *out, size_t max, size_t *n);
static int token_copy_bare(const char *p, const char *end, char *out, size_t max, size_t *n);
static void token_b64url_encode(const uint8_t *in, size_t len, char *out);
static int token_decode(const char *s, size_t len, uint8_t buf[TOKEN_DECODE_BYTES], size_t *n);
static void token_mac(uint8_t tag[TOKEN_TAG_BYTES], const uint8_t *payload, size_t len,
		      const uint8_t key[TOKEN_KEY_BYTES]);

_Static_assert(TOKEN_MAX_BYTES <= TOKEN_DECODE_BYTES, "decode buffer");
_Static_assert(sodium_base64_ENCODED_LEN(TOKEN_MAX_BYTES, TOKEN_B64) <= TOKEN_MAX_CHARS + 1,
	       "largest token fits TOKEN_MAX_CHARS");

static uint8_t *put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		*p++ = (uint8_t)(v >> (8 * i));
	return p;
}

static const uint8_t *get32(const uint8_t *p, uint32_t *v)
{
	*v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	return p + 4;
}

static void token_mac(uint8_t tag[TOKEN_TAG_BYTES], const uint8_t *payload, size_t len,
		      const uint8_t key[TOKEN_KEY_BYTES])
{
	/* Cannot fail: output and key sizes are within BLAKE2b's bounds. */
	(void)crypto_generichash(tag, TOKEN_TAG_BYTES, payload, len, key, TOKEN_KEY_BYTES);
}

int token_encode(const struct token *t, const uint8_t key[TOKEN_KEY_BYTES], char *out,
		 size_t outlen)
{
	uint8_t buf[TOKEN_MAX_BYTES], *p = buf;

	if (t->subject_len < 1 || t->subject_len > TOKEN_SUBJECT_MAX ||
	    memchr(t->subject, '\0', t->subject_len) != NULL)
		return -1;
	*p++ = TOKEN_FORMAT_VERSION;
	*p++ = t->has_version ? TOKEN_FLAG_VERSION : 0;
	p = put32(p, t->key_id);
	p = put32(p, t->tenant_id);
	p = put32(p, t->operation_id);
	memcpy(p, t->id, TOKEN_ID_BYTES);
	p += TOKEN_ID_BYTES;
	p = put32(p, t->issued_at);
	p = put32(p, t->expires_at);
	if (t->has_version) {
		p = put32(p, (uint32_t)t->version);
		p = put32(p, (uint32_t)(t->version >> 32));
	}
	*p++ = (uint8_t)t->subject_len;
	memcpy(p, t->subject, t->subject_len);
	p += t->subject_len;
	token_mac(p, buf, (size_t)(p - buf), key);
	p += TOKEN_TAG_BYTES;

	if (outlen < sodium_base64_ENCODED_LEN((size_t)(p - buf), TOKEN_B64))
		return -1;
	token_b64url_encode(buf, (size_t)(p - buf), out);
	return 0;
}

/* base64url without padding, by table: a token is no secret to hide from
 * timing (it travels in URLs), and this is the issue path's hot loop. */
static void token_b64url_encode(const uint8_t *in, size_t len, char *out)
{
	static const char digits[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	size_t i = 0;

	for (; i + 3 <= len; i += 3) {
		uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
		*out++ = digits[v >> 18];
		*out++ = digits[(v >> 12) & 63];
		*out++ = digits[(v >> 6) & 63];
		*out++ = digits[v & 63];
	}
	if (len - i == 1) {
		uint32_t v = (uint32_t)in[i] << 16;
		*out++ = digits[v >> 18];
		*out++ = digits[(v >> 12) & 63];
	} else if (len - i == 2) {
		uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
		*out++ = digits[v >> 18];
		*out++ = digits[(v >> 12) & 63];
		*out++ = digits[(v >> 6) & 63];
	}
	*out = '\0';
}

/* One more than the value of each base64url digit, 0 for every other
 * byte. */
static const uint8_t token_b64_value[256] = {
	['A'] = 1,  ['B'] = 2,	['C'] = 3,  ['D'] = 4,	['E'] = 5,  ['F'] = 6,	['G'] = 7,
	['H'] = 8,  ['I'] = 9,	['J'] = 10, ['K'] = 11, ['L'] = 12, ['M'] = 13, ['N'] = 14,
	['O'] = 15, ['P'] = 16, ['Q'] = 17, ['R'] = 18, ['S'] = 19, ['T'] = 20, ['U'] = 21,
	['V'] = 22, ['W'] = 23, ['X'] = 24, ['Y'] = 25, ['Z'] = 26, ['a'] = 27, ['b'] = 28,
	['c'] = 29, ['d'] = 30, ['e'] = 31, ['f'] = 32, ['g'] = 33, ['h'] = 34, ['i'] = 35,
	['j'] = 36, ['k'] = 37, ['l'] = 38, ['m'] = 39, ['n'] = 40, ['o'] = 41, ['p'] = 42,
	['q'] = 43, ['r'] = 44, ['s'] = 45, ['t'] = 46, ['u'] = 47, ['v'] = 48, ['w'] = 49,
	['x'] = 50, ['y'] = 51, ['z'] = 52, ['0'] = 53, ['1'] = 54, ['2'] = 55, ['3'] = 56,
	['4'] = 57, ['5'] = 58, ['6'] = 59, ['7'] = 60, ['8'] = 61, ['9'] = 62, ['-'] = 63,
	['_'] = 64,
};

/* The last group's rest (2 or 3) digits at u, decoded into out at *k
 * (moved past the 1 or 2 bytes written); 0, or -1 on a byte outside
 * base64url or a group that is not canonical. */
static int token_b64url_tail(const unsigned char *u, size_t rest, uint8_t *out, size_t *k)
{
	uint32_t a = token_b64_value[u[0]], b = token_b64_value[u[1]],
		 c = rest == 3 ? token_b64_value[u[2]] : 1;
	if (a == 0 || b == 0 || c == 0)
		return -1;
	uint32_t v = (a - 1) << 18 | (b - 1) << 12 | (c - 1) << 6;
	/* canonical: the bits left over after the last byte are zero */
	if ((v & (rest == 2 ? 0xffffu : 0xffu)) != 0)
		return -1;
	out[(*k)++] = (uint8_t)(v >> 16);
	if (rest == 3)
		out[(*k)++] = (uint8_t)(v >> 8);
	return 0;
}

int token_b64url_decode(const char *s, size_t len, uint8_t *out, size_t outmax, size_t *n)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t groups = len / 4, rest = len % 4, k = 0;

	/* a lone digit in the last group carries fewer than 8 bits */
	if (rest == 1 || groups * 3 + (rest ? rest - 1 : 0) > outmax)
		return -1;
	for (size_t i = 0; i < groups; i++, u += 4) {
		uint32_t a = token_b64_value[u[0]], b = token_b64_value[u[1]],
			 c = token_b64_value[u[2]], d = token_b64_value[u[3]];
		if (a == 0 || b == 0 || c == 0 || d == 0)
			return -1;
		uint32_t v = (a - 1) << 18 | (b - 1) << 12 | (c - 1) << 6 | (d - 1);
		out[k++] = (uint8_t)(v >> 16);
		out[k++] = (uint8_t)(v >> 8);
		out[k++] = (uint8_t)v;
	}
	if (rest > 0 && token_b64url_tail(u, rest, out, &k) != 0)
		return -1;
	*n = k;
	return 0;
}

/*
 * Decodes s into buf and checks everything but the tag. Only the canonical
 * encoding is accepted (token_b64url_decode: it alone re-encodes to s byte
 * for byte), so any altered character changes the decoded bytes and cannot
 * slip past the MAC.
 */
static int token_decode(const char *s, size_t len, uint8_t buf[TOKEN_DECODE_BYTES], size_t *n)
{
	size_t hdr;

	if (s == NULL || len == 0 || len > TOKEN_MAX_CHARS)
		return TOKEN_MALFORMED;
	if (token_b64url_decode(s, len, buf, TOKEN_DECODE_BYTES, n) != 0)
		return TOKEN_MALFORMED;

	if (*n < TOKEN_MIN_BYTES || buf[0] != TOKEN_FORMAT_VERSION ||
	    (buf[1] & ~TOKEN_FLAG_VERSION) != 0)
		return TOKEN_MALFORMED;
	hdr = TOKEN_HEADER_BYTES + ((buf[1] & TOKEN_FLAG_VERSION) ? 8 : 0);
	if (*n < hdr + 1 || buf[hdr] < 1 || buf[hdr] > TOKEN_SUBJECT_MAX ||
	    *n != hdr + 1 + buf[hdr] + TOKEN_TAG_BYTES ||
	    memchr(buf + hdr + 1, '\0', buf[hdr]) != NULL)
		return TOKEN_MALFORMED;
	return TOKEN_OK;
}

/* Fills t from the decoded bytes buf (token_decode accepted them). */
static void token_fill(const uint8_t *buf, struct token *t)
{
	const uint8_t *p = buf + 2;
	uint32_t lo, hi;

	memset(t, 0, sizeof(*t));
	p = get32(p, &t->key_id);
	p = get32(p, &t->tenant_id);
	p = get32(p, &t->operation_id);
	memcpy(t->id, p, TOKEN_ID_BYTES);
	p += TOKEN_ID_BYTES;
	p = get32(p, &t->issued_at);
	p = get32(p, &t->expires_at);
	if (buf[1] & TOKEN_FLAG_VERSION) {
		p = get32(p, &lo);
		p = get32(p, &hi);
		t->has_version = 1;
		t->version = (uint64_t)hi << 32 | lo;
	}
	t->subject_len = *p++;
	memcpy(t->subject, p, t->subject_len);
	t->subject[t->subject_len] = '\0';
}

int token_open(const char *s, size_t len, struct token *t,
	       const uint8_t *(*key_of)(uint32_t key_id, void *arg), void *arg)
{
	uint8_t buf[TOKEN_DECODE_BYTES], tag[TOKEN_TAG_BYTES];
	const uint8_t *key;
	size_t n;

	if (token_decode(s, len, buf, &n) != TOKEN_OK)
		return TOKEN_MALFORMED;
	token_fill(buf, t);
	key = key_of(t->key_id, arg);
	if (key == NULL)
		return TOKEN_BAD_SIGNATURE;
	token_mac(tag, buf, n - TOKEN_TAG_BYTES, key);
	if (crypto_verify_16(tag, buf + n - TOKEN_TAG_BYTES) != 0)
		return TOKEN_BAD_SIGNATURE;
	return TOKEN_OK;
}

void token_id_hex(const uint8_t id[TOKEN_ID_BYTES], char out[2 * TOKEN_ID_BYTES + 1])
{
	static const char hex[] = "0123456789abcdef";

	/* ids are public: no need for sodium_bin2hex's constant time */
	for (size_t i = 0; i < TOKEN_ID_BYTES; i++) {
		out[2 * i] = hex[id[i] >> 4];
		out[2 * i + 1] = hex[id[i] & 15];
	}
	out[2 * TOKEN_ID_BYTES] = '\0';
}

static int token_b64_char(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '_';
}

/* The quoted form: what lies between the quote at p and the one that ends
 * at end, unescaped (only \" and \\), into out, at most max characters,
 * their count in *n; 0, or -1 on a bad escape, a byte outside printable
 * ASCII, more than max characters, or no closing quote right at end. */
static int token_unquote(const char *p, const char *end, char *out, size_t max, size_t *n)
{
	for (p++; p < end && *p != '"'; p++) {
		if (*p == '\\') {
			p++;
			if (p == end || (*p != '"' && *p != '\\'))
				return -1;
		} else if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
			return -1;
		if (*n == max)
			return -1;
		out[(*n)++] = *p;
	}
	if (p == end || p + 1 != end) /* unterminated or trailing */
		return -1;
	return 0;
}

/* The bare form: p to end into out, at most max characters, their count
 * in *n; 0, or -1 on a byte outside base64url or more than max. */
static int token_copy_bare(const char *p, const char *end, char *out, size_t max, size_t *n)
{
	for (; p < end; p++) {
		if (!token_b64_char(*p))
			return -1;
		if (*n == max)
			return -1;
		out[(*n)++] = *p;
	}
	return 0;
}

int token_from_header(const char *value, char *out, size_t outlen)
{
	const char *p, *end;
	size_t n = 0, max;

	if (value == NULL || outlen == 0)
		return -1;
	max = outlen - 1 < TOKEN_MAX_CHARS ? outlen - 1 : TOKEN_MAX_CHARS;
	p = value + strspn(value, " \t");
	end = p + strlen(p);
	while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
		end--;

	if (p < end && *p == '"') {
		if (token_unquote(p, end, out, max, &n) != 0)
			return -1;
	} else if (token_copy_bare(p, end, out, max, &n) != 0)
		return -1;
	if (n == 0)
		return -1;
	out[n] = '\0';
	return 0;
}

uint32_t token_expiry(int64_t now_ms, int64_t ttl)
{
	return (uint32_t)((now_ms + 999) / 1000 + ttl);
}
