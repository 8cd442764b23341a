/* The API's own routes (routes.c).
 * Ownership: nothing is passed; the table is static. */
#ifndef IDEMD_ROUTES_H
#define IDEMD_ROUTES_H

#include "common.h"

/* Gives the router the API's route table (router_set_table, borrowed for
 * good): once, before serving. */
void routes_init(void);

#endif
