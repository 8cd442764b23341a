/* UTF-8 text cut to fit a buffer. */
#include "utf8.h"

#include <string.h>

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
