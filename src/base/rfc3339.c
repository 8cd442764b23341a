/* RFC 3339 times: unix milliseconds as "2024-01-02T03:04:05.678Z", the
 * one form idemd writes times in (answers, logs, the CLI). */
#include "rfc3339.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common.h"

/* common.h: the database's clock less this host's monotonic one, and less
 * its wall clock, set by the janitor */
_Atomic int64_t idemd_clock_offset_ms = 0;
_Atomic int64_t idemd_clock_skew_ms = 0;

int64_t idemd_unix_ms(void)
{
	int64_t offset = idemd_clock_offset_ms;

	if (offset == 0)
		return idemd_local_unix_ms();
#ifdef IDEMD_MUTANT_CLOCK_STEPS_SEEN
	/* the wall clock, so a step counts until the next measurement */
	return idemd_local_unix_ms() + idemd_clock_skew_ms;
#endif
	return idemd_mono_ms() + offset;
}

/* Writes the 2 decimal digits of V (0..99) at P. */
static char *rfc3339_2digits(char *p, unsigned v)
{
	*p++ = (char)('0' + v / 10);
	*p++ = (char)('0' + v % 10);
	return p;
}

size_t rfc3339_text(int64_t unix_ms, char out[RFC3339_MAX])
{
	int64_t ms = ((unix_ms % 1000) + 1000) % 1000;
	int64_t secs = (unix_ms - ms) / 1000;
	int64_t days = secs / 86400, rem = secs % 86400;

	if (rem < 0) {
		rem += 86400;
		days--;
	}
	/* civil date of a day count (proleptic Gregorian, eras of 400 years) */
	int64_t z = days + 719468;
	int64_t era = (z >= 0 ? z : z - 146096) / 146097;
	int64_t doe = z - era * 146097;
	int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	int64_t mp = (5 * doy + 2) / 153;
	int64_t day = doy - (153 * mp + 2) / 5 + 1;
	int64_t month = mp < 10 ? mp + 3 : mp - 9;
	int64_t year = yoe + era * 400 + (month <= 2);

	if (year < 1000 || year > 9999) {
		/* not four digits: as strftime prints them */
		struct tm tm;
		time_t t = (time_t)secs;
		gmtime_r(&t, &tm);
		size_t n = strftime(out, RFC3339_MAX, "%Y-%m-%dT%H:%M:%S", &tm);
		snprintf(out + n, RFC3339_MAX - n, ".%03dZ", (int)ms);
		return strlen(out);
	}
	char *p = out;
	p = rfc3339_2digits(p, (unsigned)(year / 100));
	p = rfc3339_2digits(p, (unsigned)(year % 100));
	*p++ = '-';
	p = rfc3339_2digits(p, (unsigned)month);
	*p++ = '-';
	p = rfc3339_2digits(p, (unsigned)day);
	*p++ = 'T';
	p = rfc3339_2digits(p, (unsigned)(rem / 3600));
	*p++ = ':';
	p = rfc3339_2digits(p, (unsigned)(rem / 60 % 60));
	*p++ = ':';
	p = rfc3339_2digits(p, (unsigned)(rem % 60));
	*p++ = '.';
	*p++ = (char)('0' + ms / 100);
	p = rfc3339_2digits(p, (unsigned)(ms % 100));
	*p++ = 'Z';
	*p = '\0';
	return (size_t)(p - out);
}

json_t *rfc3339_json(int64_t unix_ms)
{
	char buf[RFC3339_MAX];

	rfc3339_text(unix_ms, buf);
	return json_string(buf);
}
