/* Unit tests for utf8.c: text cut at a character boundary, and text
 * escaped for a person's terminal (issue 38: a tenant's subject holding
 * ESC, BEL, CR or LF retitled the operator's terminal, cleared its screen
 * and forged a row of `idemd records list --format table`). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "utf8.h"
#include "unit.h"

static void check(const char *in, enum utf8_escape how, const char *want)
{
	char *got = utf8_escape_controls(in, how);

	assert_non_null(got);
	assert_string_equal(got, want);
	free(got);
}

/* No byte of the result is a control: C0, DEL, C1 (as UTF-8) or a byte
 * that is not UTF-8. */
static void assert_terminal_safe(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	for (; *p != '\0'; p++) {
		assert_true(*p >= 0x20 && *p != 0x7F);
		if (*p == 0xC2)
			assert_true(p[1] >= 0xA0);
	}
}

static void test_text_controls(void **state)
{
	(void)state;
	check("plain user-42", UTF8_ESCAPE_TEXT, "plain user-42");
	check("caf\xc3\xa9 \xe2\x82\xac", UTF8_ESCAPE_TEXT, "caf\xc3\xa9 \xe2\x82\xac");
	/* the attack: a title, a clear screen, a forged row */
	check("x\x1b]0;pwned\x07\x1b[2J\r\nabc  completed", UTF8_ESCAPE_TEXT,
	      "x\\e]0;pwned\\x07\\e[2J\\r\\nabc  completed");
	check("tab\there", UTF8_ESCAPE_TEXT, "tab\\there");
	check("del\x7f", UTF8_ESCAPE_TEXT, "del\\x7f");
	check("back\\slash", UTF8_ESCAPE_TEXT, "back\\\\slash");
	/* C1 as UTF-8 (U+009B is CSI), and bytes that are not UTF-8 */
	check("c1\xc2\x9b"
	      "2J \xc2\x85",
	      UTF8_ESCAPE_TEXT, "c1\\u009b2J \\u0085");
	check("raw\x9b"
	      "2J \xff\xc3",
	      UTF8_ESCAPE_TEXT, "raw\\x9b2J \\xff\\xc3");
	check("\xed\xa0\x80", UTF8_ESCAPE_TEXT, "\\xed\\xa0\\x80"); /* a surrogate */
	check("", UTF8_ESCAPE_TEXT, "");
}

static void test_json_controls(void **state)
{
	(void)state;
	/* jansson escapes C0; DEL and C1 pass it raw */
	check("{\"subject\":\"a\\u001b[2J\"}", UTF8_ESCAPE_JSON, "{\"subject\":\"a\\u001b[2J\"}");
	check("{\"s\":\"\x7f\xc2\x9b\xc3\xa9\"}", UTF8_ESCAPE_JSON,
	      "{\"s\":\"\\u007f\\u009b\xc3\xa9\"}");
	check("{\"s\":\"a\\\\b\"}", UTF8_ESCAPE_JSON, "{\"s\":\"a\\\\b\"}");
}

/* The code points that reorder or break a line of text without showing
 * themselves: bidi embeddings, overrides and isolates (U+202A..U+202E,
 * U+2066..U+2069), the marks (U+200E, U+200F, U+061C) and the line and
 * paragraph separators (U+2028, U+2029). */
static int is_invisible_control(unsigned cp)
{
	return cp == 0x061C || cp == 0x200E || cp == 0x200F || cp == 0x2028 || cp == 0x2029 ||
	       (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

static void test_bidi_and_separators(void **state)
{
	(void)state;
	/* "Trojan Source": a cell shown reordered, a row broken in two */
	check("user\xe2\x80\xae"
	      "cba\xe2\x81\xa6x\xe2\x81\xa9",
	      UTF8_ESCAPE_TEXT, "user\\u202ecba\\u2066x\\u2069");
	check("a\xe2\x80\xa8"
	      "b\xe2\x80\xa9"
	      "c\xe2\x80\x8f\xd8\x9c",
	      UTF8_ESCAPE_TEXT, "a\\u2028b\\u2029c\\u200f\\u061c");
	check("{\"s\":\"\xe2\x80\xaa\xe2\x80\x8e\"}", UTF8_ESCAPE_JSON,
	      "{\"s\":\"\\u202a\\u200e\"}");
	/* every other character of the BMP is kept as it came */
	for (unsigned cp = 0xA0; cp < 0x10000; cp++) {
		char in[4], want[8];
		if (cp >= 0xD800 && cp <= 0xDFFF)
			continue;
		if (cp < 0x800) {
			in[0] = (char)(0xC0 | (cp >> 6));
			in[1] = (char)(0x80 | (cp & 0x3F));
			in[2] = '\0';
		} else {
			in[0] = (char)(0xE0 | (cp >> 12));
			in[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
			in[2] = (char)(0x80 | (cp & 0x3F));
			in[3] = '\0';
		}
		if (is_invisible_control(cp))
			snprintf(want, sizeof(want), "\\u%04x", cp);
		else
			snprintf(want, sizeof(want), "%s", in);
		for (int how = 0; how < 2; how++)
			check(in, (enum utf8_escape)how, want);
	}
}

static void test_every_byte_pair_is_safe(void **state)
{
	char in[3] = { 0 };

	(void)state;
	for (int a = 1; a < 256; a++) {
		for (int b = 0; b < 256; b++) {
			in[0] = (char)a;
			in[1] = (char)b;
			for (int how = 0; how < 2; how++) {
				char *got = utf8_escape_controls(in, (enum utf8_escape)how);
				assert_non_null(got);
				if (how == UTF8_ESCAPE_TEXT)
					assert_terminal_safe(got);
				free(got);
			}
		}
	}
}

static void test_cut_tail(void **state)
{
	char s[] = "ab\xc3";

	(void)state;
	utf8_cut_tail(s);
	assert_string_equal(s, "ab");
}

UNIT_MAIN(cmocka_unit_test(test_text_controls), cmocka_unit_test(test_json_controls),
	  cmocka_unit_test(test_bidi_and_separators),
	  cmocka_unit_test(test_every_byte_pair_is_safe), cmocka_unit_test(test_cut_tail))
