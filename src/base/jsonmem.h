/*
 * jansson's allocator, with a budget per parse: a request body's JSON is
 * parsed within a bound on the memory its values take (a megabyte of
 * "[{},{},…]" would otherwise take about a hundred), so that hostile
 * bodies cannot exhaust memory through the parse.
 *
 * jsonmem_init() must run before anything allocates through jansson (first
 * thing in main()); without it jansson keeps the C library's allocator and
 * jsonmem_load() parses without a bound.

 *
 * Ownership: BUF is borrowed for the call; jsonmem_load() returns an owned
 * value: the caller releases it with json_decref().
 */
#ifndef IDEMD_JSONMEM_H
#define IDEMD_JSONMEM_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"

void jsonmem_init(void);

/* What a parse of LEN bytes of text may allocate in all: JSONMEM_FLOOR
 * plus JSONMEM_FACTOR bytes per byte of text (ordinary JSON takes 3 to 10,
 * its buffers' growth included). */
#define JSONMEM_FLOOR (4u << 20)
#define JSONMEM_FACTOR 16u
size_t jsonmem_budget(size_t len);

/* json_loadb(BUF, LEN, FLAGS, ERR) within jsonmem_budget(LEN): the value
 * (the caller decrefs), or NULL with *OVER 1 when the budget ran out (ERR
 * then says "out of memory"), 0 when the text is not JSON. */
json_t *jsonmem_load(const char *buf, size_t len, size_t flags, json_error_t *err,
		     int *over) IDEMD_WUR;

#endif
