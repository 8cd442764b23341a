/* UTF-8 text cut to fit a buffer, and escaped for a person's terminal.
 * Ownership: arguments are borrowed for the call; utf8_escape_controls()
 * returns an owned string (free()). */
#ifndef IDEMD_UTF8_H
#define IDEMD_UTF8_H

#include "common.h"

/* S was cut short (snprintf at its buffer's end): drops the character cut
 * in half at its end, if any, so that S stays valid UTF-8 when it was. */
void utf8_cut_tail(char *s);

/*
 * S made safe to print to a terminal: no byte of the result is a control
 * character (C0 below 0x20, DEL 0x7f) or part of a C1 control (U+0080 to
 * U+009F, bytes C2 80..C2 9F), and no byte is outside valid UTF-8 (a lone
 * 0x9b is CSI to an 8-bit terminal), and no character reorders or breaks
 * a line without showing itself: the bidi embeddings, overrides and
 * isolates (U+202A..U+202E, U+2066..U+2069), the direction marks (U+200E,
 * U+200F, U+061C) and the line and paragraph separators (U+2028, U+2029)
 * become \u202e etc. Other text, UTF-8 included, is kept.
 *
 * UTF8_ESCAPE_TEXT: for a table cell; \t \n \r \e and a backslash as
 * "\\", other controls and invalid bytes as \xNN, C1 as \u0085.
 * UTF8_ESCAPE_JSON: S is JSON text (jansson escapes C0 already): DEL and C1
 * become \u007f .. \u009f, which a JSON reader reads as the same string.
 *
 * Returns an owned string (free() it), or NULL when out of memory.
 */
enum utf8_escape { UTF8_ESCAPE_TEXT, UTF8_ESCAPE_JSON };
char *utf8_escape_controls(const char *s, enum utf8_escape how) IDEMD_WUR;

#endif
