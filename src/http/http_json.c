/* JSON over HTTP: the text of a JSON reply. Apart from http_reply.c so
 * that unit tests can replace the replies and keep it. */
#include "request.h"

#include <stdlib.h>
#include <string.h>

char *http_json_text(const json_t *v, size_t flags, size_t *len)
{
	char *text = v ? json_dumps(v, flags) : NULL;
	size_t n = text ? strlen(text) : 0;
	char *line = text ? realloc(text, n + 2) : NULL;

	if (line == NULL) {
		free(text);
		return NULL;
	}
	line[n] = '\n';
	line[n + 1] = '\0';
	if (len != NULL)
		*len = n + 1;
	return line;
}
