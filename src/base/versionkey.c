/* Version keys. */
#include "versionkey.h"

#include <string.h>

int versionkey_valid(const char *key)
{
	size_t n = 0;

	for (; key[n] != '\0'; n++)
		if ((unsigned char)key[n] <= 0x20 || (unsigned char)key[n] >= 0x7f)
			return 0;
	return n >= 1 && n <= VERSIONKEY_MAX;
}

int versionkey_expand(const char *tmpl, const char *subject, char *out, size_t outlen)
{
	static const char placeholder[] = "{subject}";
	size_t used = 0, slen = strlen(subject);

	if (outlen == 0)
		return -1;
	while (*tmpl != '\0') {
		const char *piece = tmpl;
		size_t n = 1;
		if (strncmp(tmpl, placeholder, sizeof(placeholder) - 1) == 0) {
			piece = subject;
			n = slen;
			tmpl += sizeof(placeholder) - 1;
		} else {
			tmpl++;
		}
		if (used + n >= outlen)
			return -1;
		memcpy(out + used, piece, n);
		used += n;
	}
	out[used] = '\0';
	return versionkey_valid(out) ? 0 : -1;
}
