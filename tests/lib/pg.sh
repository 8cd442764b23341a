# The PostgreSQL a stage script runs against; sourced by tests/lib/stage.sh
# (for tests/clients.sh, tests/prometheus.sh and tests/contract.sh),
# tests/queue.sh and tests/checker.sh after they set ROOT (the checkout) and
# TMP (their private folder, 0711).
#
#   pg_use             use the cluster IDEMD_TEST_PGHOST/IDEMD_TEST_PGUSER
#                      name (tests/run.sh sets them), else start a throwaway
#                      one in $TMP/pg; exports IDEMD_TEST_PGHOST, _PGUSER,
#                      _PSQL, _PGDATA and _PGCTL (the last two empty for a
#                      cluster named from outside without them); returns 1
#                      when the cluster did not start
#   pg_createdb PREFIX create a fresh database PREFIX_<random hex>, its name in
#                      DB; returns 1 on failure
#   pg_cleanup         drop DB if set, stop the cluster pg_use started; for
#                      the script's EXIT trap
# PSQL is the psql to call: IDEMD_TEST_PSQL, else PostgreSQL 15's, else the
# one on the PATH.

own_pg=0
PSQL=${IDEMD_TEST_PSQL:-/usr/lib/postgresql/15/bin/psql}
[ -x "$PSQL" ] || PSQL=psql

pg_use() {
  if [ -z "${IDEMD_TEST_PGHOST:-}" ] || [ -z "${IDEMD_TEST_PGUSER:-}" ]; then
    printf '\n==> %s\n' "starting a throwaway PostgreSQL"
    bash "$ROOT/deploy/pg.sh" init "$TMP/pg" >/dev/null &&
      bash "$ROOT/deploy/pg.sh" start "$TMP/pg" >/dev/null || return 1
    own_pg=1
    IDEMD_TEST_PGHOST=$(bash "$ROOT/deploy/pg.sh" socket "$TMP/pg")
    IDEMD_TEST_PGUSER=$(bash "$ROOT/deploy/pg.sh" role "$TMP/pg")
    IDEMD_TEST_PGDATA=$(readlink -f "$TMP/pg")/data
    IDEMD_TEST_PGCTL="bash $(printf %q "$ROOT/deploy/pg.sh") pg_ctl $(printf %q "$TMP/pg")"
  fi
  IDEMD_TEST_PSQL=$PSQL
  export IDEMD_TEST_PGHOST IDEMD_TEST_PGUSER IDEMD_TEST_PSQL \
    IDEMD_TEST_PGDATA="${IDEMD_TEST_PGDATA:-}" IDEMD_TEST_PGCTL="${IDEMD_TEST_PGCTL:-}"
}

pg_createdb() {
  DB=$1_$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
  PGHOST=$IDEMD_TEST_PGHOST PGUSER=$IDEMD_TEST_PGUSER \
    "$PSQL" -X -q -v ON_ERROR_STOP=1 -d postgres -c "CREATE DATABASE \"$DB\""
}

# shellcheck disable=SC2317
pg_cleanup() {
  if [ -n "${DB:-}" ]; then
    PGHOST=$IDEMD_TEST_PGHOST PGUSER=$IDEMD_TEST_PGUSER \
      "$PSQL" -X -q -d postgres -c "DROP DATABASE IF EXISTS \"$DB\" WITH (FORCE)" >/dev/null 2>&1
  fi
  if [ "$own_pg" = 1 ]; then bash "$ROOT/deploy/pg.sh" stop "$TMP/pg" >/dev/null 2>&1; fi
}
