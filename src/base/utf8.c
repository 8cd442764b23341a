/* UTF-8 text cut to fit a buffer, and escaped for a person's terminal. */
#include "utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"

void utf8_cut_tail(char *s)
{
	size_t k = strlen(s);

	/* back over continuation bytes to the lead byte of the last character */
	while (k > 0 && ((unsigned char)s[k - 1] & 0xC0) == 0x80)
		k--;
	/* a lead byte whose character went on past the cut: drop it and them */
	if (k > 0 && ((unsigned char)s[k - 1] & 0x80) != 0)
		s[k - 1] = '\0';
}

/* The length of the valid UTF-8 character at S (1 to 4), or 0. */
static size_t utf8_char_len(const unsigned char *s)
{
	unsigned c = s[0];
	size_t n;
	unsigned min;

	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		n = 2, min = 0x80;
	else if (c >= 0xE0 && c <= 0xEF)
		n = 3, min = 0x800;
	else if (c >= 0xF0 && c <= 0xF4)
		n = 4, min = 0x10000;
	else
		return 0;
	unsigned cp = c & (0x7F >> n);
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3F);
	}
	if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	return n;
}

/* 1 when the valid character of N bytes at P reorders or breaks a line
 * without showing itself: a bidi embedding, override or isolate
 * (U+202A..U+202E, U+2066..U+2069), a direction mark (U+200E, U+200F,
 * U+061C), a line or paragraph separator (U+2028, U+2029). */
static int utf8_invisible(const unsigned char *p, size_t n)
{
	if (n == 2)
		return p[0] == 0xD8 && p[1] == 0x9C;
	if (n != 3 || p[0] != 0xE2)
		return 0;
	if (p[1] == 0x80)
		return p[2] == 0x8E || p[2] == 0x8F || (p[2] >= 0xA8 && p[2] <= 0xAE);
	return p[1] == 0x81 && p[2] >= 0xA6 && p[2] <= 0xA9;
}

/* The escape of the single byte C (a control, DEL, a backslash in text, or
 * a byte that starts no valid character); borrowed: a literal, or ESC
 * (of ESCLEN bytes) written with a numeric escape. */
static const char *utf8_escape_byte(unsigned char c, enum utf8_escape how, char *esc, size_t esclen)
{
	if (how == UTF8_ESCAPE_JSON && c == 0x7F)
		return "\\u007f";
	if (how == UTF8_ESCAPE_JSON && c >= 0x20)
		return "\\ufffd"; /* not from jansson: invalid UTF-8 */
	if (c == '\\')
		return "\\\\";
	if (c == '\t' || c == '\n' || c == '\r' || c == 0x1B)
		return c == '\t' ? "\\t" : c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\e";
	snprintf(esc, esclen, how == UTF8_ESCAPE_JSON ? "\\u%04x" : "\\x%02x", c);
	return esc;
}

char *utf8_escape_controls(const char *s, enum utf8_escape how)
{
	const unsigned char *p = (const unsigned char *)s;
	struct buf b = { 0 };
	char esc[8];

	while (*p != '\0') {
		size_t n = utf8_char_len(p);
		const char *put = NULL;
		if (n == 2 && p[0] == 0xC2 && p[1] < 0xA0) {
			snprintf(esc, sizeof(esc), "\\u%04x", p[1]); /* C1 */
			put = esc;
		} else if (utf8_invisible(p, n)) {
			unsigned cp = n == 2 ? 0x061Cu
					     : 0x2000u | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
			snprintf(esc, sizeof(esc), "\\u%04x", cp);
			put = esc;
		} else if (n == 0 || *p < 0x20 || *p == 0x7F ||
			   (*p == '\\' && how == UTF8_ESCAPE_TEXT)) {
			n = 1;
			put = utf8_escape_byte(*p, how, esc, sizeof(esc));
		}
		if (put != NULL)
			buf_str(&b, put);
		else
			buf_add(&b, p, n);
		p += n;
	}
	if (b.b_failed) {
		buf_free(&b);
		return NULL;
	}
	return b.b_data != NULL ? buf_take(&b) : strdup("");
}
