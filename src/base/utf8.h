/* UTF-8 text cut to fit a buffer. */
#ifndef IDEMD_UTF8_H
#define IDEMD_UTF8_H

/* S was cut short (snprintf at its buffer's end): drops the character cut
 * in half at its end, if any, so that S stays valid UTF-8 when it was. */
void utf8_cut_tail(char *s);

#endif
