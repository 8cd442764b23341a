/* Unit tests for version keys: validation and "{subject}" expansion. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "versionkey.h"
#include "unit.h"

static void assert_expands(const char *tmpl, const char *subject, const char *expected);
static void assert_refused(const char *tmpl, const char *subject);
static void fill(char *buf, char c, size_t n);

static void assert_expands(const char *tmpl, const char *subject, const char *expected)
{
	char out[VERSIONKEY_MAX + 1];

	if (versionkey_expand(tmpl, subject, out, sizeof(out)) != 0)
		fail_msg("expand(%s, %s) refused, expected %s", tmpl, subject, expected);
	assert_string_equal(out, expected);
	assert_int_equal(versionkey_valid(out), 1);
}

static void assert_refused(const char *tmpl, const char *subject)
{
	char out[VERSIONKEY_MAX + 1];

	if (versionkey_expand(tmpl, subject, out, sizeof(out)) != -1)
		fail_msg("expand(%s, %s) accepted as %s", tmpl, subject, out);
}

/* BUF gets N copies of C and a terminating NUL. */
static void fill(char *buf, char c, size_t n)
{
	memset(buf, c, n);
	buf[n] = '\0';
}

static void test_valid(void **state)
{
	char key[VERSIONKEY_MAX + 2];

	(void)state;
	assert_int_equal(versionkey_valid("a"), 1);
	assert_int_equal(versionkey_valid("orders:user-42"), 1);
	assert_int_equal(versionkey_valid("{subject}"), 1);
	assert_int_equal(versionkey_valid(
				 "!\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ"
				 "[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~"),
			 1);

	assert_int_equal(versionkey_valid(""), 0);
	assert_int_equal(versionkey_valid(" "), 0);
	assert_int_equal(versionkey_valid("orders: 42"), 0);
	assert_int_equal(versionkey_valid("orders:42 "), 0);
	assert_int_equal(versionkey_valid("orders\t42"), 0);
	assert_int_equal(versionkey_valid("orders\n"), 0);
	assert_int_equal(versionkey_valid("\x01"), 0);
	assert_int_equal(versionkey_valid("a\x7f"), 0);
	assert_int_equal(versionkey_valid("a\x80"), 0);
	assert_int_equal(versionkey_valid("caf\xc3\xa9"), 0);
	assert_int_equal(versionkey_valid("\xff"), 0);

	fill(key, 'k', VERSIONKEY_MAX);
	assert_int_equal(versionkey_valid(key), 1);
	fill(key, 'k', VERSIONKEY_MAX + 1);
	assert_int_equal(versionkey_valid(key), 0);
	fill(key, 'k', VERSIONKEY_MAX);
	key[VERSIONKEY_MAX - 1] = ' ';
	assert_int_equal(versionkey_valid(key), 0);
}

static void test_expand(void **state)
{
	(void)state;
	/* once, twice, never */
	assert_expands("orders:{subject}", "user-42", "orders:user-42");
	assert_expands("{subject}", "u", "u");
	assert_expands("{subject}:cart", "u", "u:cart");
	assert_expands("{subject}/{subject}", "u1", "u1/u1");
	assert_expands("a{subject}{subject}b", "x", "axxb");
	assert_expands("global", "user-42", "global");
	/* only the exact placeholder is replaced */
	assert_expands("{Subject}", "u", "{Subject}");
	assert_expands("{subject", "u", "{subject");
	assert_expands("subject}", "u", "subject}");
	assert_expands("{subjec}", "u", "{subjec}");
	assert_expands("{{subject}}", "u", "{u}");
	assert_expands("{subject}}", "u", "u}");
	assert_expands("{{subject}", "u", "{u");
	/* one pass: a subject holding the placeholder stays literal */
	assert_expands("k:{subject}", "{subject}", "k:{subject}");
	/* an empty subject is allowed when the result is still a key */
	assert_expands("orders:{subject}", "", "orders:");
	/* subjects with any printable character */
	assert_expands("o:{subject}", "a:b/c{}~", "o:a:b/c{}~");
}

static void test_expand_invalid(void **state)
{
	(void)state;
	/* the result must be a valid key */
	assert_refused("orders:{subject}", "user 42");
	assert_refused("orders:{subject}", " ");
	assert_refused("orders:{subject}", "tab\there");
	assert_refused("orders:{subject}", "caf\xc3\xa9");
	assert_refused("orders:{subject}", "new\nline");
	assert_refused("{subject}", "");
	assert_refused("", "u");
	assert_refused("bad key:{subject}", "u");
	/* a template without the placeholder is still checked */
	assert_refused("bad key", "u");
}

static void test_expand_lengths(void **state)
{
	char subject[VERSIONKEY_MAX + 2], tmpl[VERSIONKEY_MAX + 16], expected[VERSIONKEY_MAX + 2];
	char out[VERSIONKEY_MAX * 2 + 1];

	(void)state;
	/* exactly VERSIONKEY_MAX after expansion fits VERSIONKEY_MAX + 1 */
	fill(subject, 's', VERSIONKEY_MAX - 2);
	strcpy(expected, "k:");
	strcat(expected, subject);
	assert_expands("k:{subject}", subject, expected);
	assert_int_equal(strlen(expected), VERSIONKEY_MAX);

	/* one more byte: refused whether or not the buffer has room */
	fill(subject, 's', VERSIONKEY_MAX - 1);
	assert_refused("k:{subject}", subject);
	assert_int_equal(versionkey_expand("k:{subject}", subject, out, sizeof(out)), -1);

	/* a literal template at the limit and one past it */
	fill(tmpl, 't', VERSIONKEY_MAX);
	assert_expands(tmpl, "u", tmpl);
	fill(tmpl, 't', VERSIONKEY_MAX + 1);
	assert_int_equal(versionkey_expand(tmpl, "u", out, sizeof(out)), -1);

	/* two placeholders of 256 bytes each: 512, the limit */
	fill(subject, 'x', 256);
	fill(expected, 'x', 512);
	assert_expands("{subject}{subject}", subject, expected);
	/* 257 each: 514, too long */
	fill(subject, 'x', 257);
	assert_refused("{subject}{subject}", subject);
	assert_int_equal(versionkey_expand("{subject}{subject}", subject, out, sizeof(out)), -1);
}

/* OUTLEN bounds the write: the result needs strlen + 1 bytes. */
static void test_expand_small_buffer(void **state)
{
	char out[16];

	(void)state;
	memset(out, '#', sizeof(out));
	assert_int_equal(versionkey_expand("k:{subject}", "abc", out, 6), 0);
	assert_string_equal(out, "k:abc");
	assert_int_equal(out[6], '#');

	memset(out, '#', sizeof(out));
	assert_int_equal(versionkey_expand("k:{subject}", "abc", out, 5), -1);
	for (size_t i = 5; i < sizeof(out); i++)
		assert_int_equal(out[i], '#');

	memset(out, '#', sizeof(out));
	assert_int_equal(versionkey_expand("{subject}", "abcdefgh", out, 8), -1);
	for (size_t i = 8; i < sizeof(out); i++)
		assert_int_equal(out[i], '#');

	memset(out, '#', sizeof(out));
	assert_int_equal(versionkey_expand("literal", "u", out, 1), -1);
	for (size_t i = 1; i < sizeof(out); i++)
		assert_int_equal(out[i], '#');
}

UNIT_MAIN(cmocka_unit_test(test_valid), cmocka_unit_test(test_expand),
	  cmocka_unit_test(test_expand_invalid), cmocka_unit_test(test_expand_lengths),
	  cmocka_unit_test(test_expand_small_buffer))
