/* The API's own routes (routes.c). */
#ifndef IDEMD_ROUTES_H
#define IDEMD_ROUTES_H

#include "common.h"

/* Hands the API's route table to the router: once, before serving. */
void routes_init(void);

#endif
