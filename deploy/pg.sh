#!/usr/bin/env bash
# Manages a private PostgreSQL 15 cluster kept in one folder: data/ (the
# cluster), run/ (its unix socket; no TCP at all) and server.log.
#
#   pg.sh init DIR            create the cluster unless it exists
#   pg.sh start DIR           start it (no-op when running)
#   pg.sh stop DIR            fast shutdown (no-op when stopped)
#   pg.sh status DIR          exit 0 when running
#   pg.sh createdb DIR NAME   create database NAME unless it exists
#   pg.sh conninfo DIR NAME   print the libpq conninfo for database NAME
#   pg.sh socket DIR          print the socket directory
#   pg.sh role DIR            print the database role to connect as
#   pg.sh psql DIR [ARGS...]  run psql against the cluster
#   pg.sh pg_ctl DIR ARGS...  run pg_ctl ARGS as the cluster's owner
#
# Local connections use trust authentication, so the socket directory is
# private (mode 0700). PostgreSQL refuses to run as root: under root it runs
# as the system user idemd-pg, and the role to connect as is still named
# after the calling user ("root"), created as the cluster's superuser.
set -euo pipefail

PGBIN=/usr/lib/postgresql/15/bin
PG_SYSUSER=idemd-pg
unset PGHOST PGHOSTADDR PGPORT PGUSER PGDATABASE PGDATA PGOPTIONS PGSERVICE

die() { echo "pg.sh: $*" >&2; exit 1; }
is_root() { [ "$(id -u)" -eq 0 ]; }

# Run a command as the user that owns the cluster.
as_pg() {
  if is_root; then (cd / && runuser -u "$PG_SYSUSER" -- "$@"); else "$@"; fi
}

ensure_sysuser() {
  is_root || return 0
  id -u "$PG_SYSUSER" >/dev/null 2>&1 && return 0
  useradd --system --no-create-home --home-dir /nonexistent \
          --shell /usr/sbin/nologin "$PG_SYSUSER"
}

# Give DIR to the cluster's owner, mode 0700.
own() {
  if is_root; then chown "$PG_SYSUSER:" "$1"; fi
  chmod 700 "$1"
}

sock_dir() {
  [ -f "$DIR/socket_dir" ] || die "$DIR is not a cluster folder (run: $0 init $DIR)"
  cat "$DIR/socket_dir"
}

running() {
  [ -f "$DIR/data/PG_VERSION" ] && as_pg "$PGBIN/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1
}

# The socket directory may live under /tmp (see init): recreate it when gone.
ensure_sock_dir() {
  local s; s=$(sock_dir)
  if [ ! -d "$s" ]; then
    mkdir -m 700 "$s"
    own "$s"
  fi
  local want; want=$(id -u)
  if is_root; then want=$(id -u "$PG_SYSUSER"); fi
  [ "$(stat -c %u "$s")" = "$want" ] || die "socket directory $s belongs to someone else"
}

cmd_init() {
  if [ -f "$DIR/data/PG_VERSION" ]; then return 0; fi
  ensure_sysuser
  mkdir -p "$DIR"
  own "$DIR"
  # Under root, every parent of DIR must be searchable by idemd-pg. When one
  # is not (a project under /root, say), keep the cluster in /var/lib and
  # leave a symlink in its place.
  if is_root && ! as_pg test -w "$DIR"; then
    rmdir "$DIR" 2>/dev/null || die "$DIR is not empty and user $PG_SYSUSER cannot reach it"
    local real; real=/var/lib/idemd-pg/$(basename "$DIR")-$(printf %s "$DIR" | cksum | cut -d' ' -f1)
    mkdir -p "$real"
    chmod 755 "$(dirname "$real")"
    own "$real"
    ln -s "$real" "$DIR"
    echo "pg.sh: user $PG_SYSUSER cannot reach $DIR (a parent folder is not searchable by others);" >&2
    echo "pg.sh: the cluster lives in $real instead, linked from $DIR" >&2
    DIR=$real
  fi
  # A unix socket path must fit in 107 bytes, "/.s.PGSQL.5432" included.
  local s="$DIR/run"
  if [ $(( ${#s} + 14 )) -gt 107 ]; then
    s=$(mktemp -d /tmp/idemd-pg.XXXXXX)
    echo "pg.sh: $DIR/run is too long for a unix socket; using $s" >&2
  else
    mkdir -p "$s"
  fi
  own "$s"
  printf '%s\n' "$s" > "$DIR/socket_dir"
  as_pg "$PGBIN/initdb" -D "$DIR/data" -U "$(id -un)" --auth-local=trust \
        --auth-host=reject --no-locale -E UTF8 --no-instructions >"$DIR/initdb.log" 2>&1 \
    || { cat "$DIR/initdb.log" >&2; die "initdb failed"; }
  local q=${s//\'/\'\'}
  as_pg tee -a "$DIR/data/postgresql.conf" >/dev/null <<EOF

# private cluster settings
listen_addresses = ''
port = 5432
unix_socket_directories = '$q'
max_connections = 200
fsync = on
synchronous_commit = on
full_page_writes = on
EOF
}

cmd_start() {
  [ -f "$DIR/data/PG_VERSION" ] || die "no cluster in $DIR (run: $0 init $DIR)"
  running && return 0
  ensure_sock_dir
  as_pg "$PGBIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 -s start \
    || { tail -n 20 "$DIR/server.log" >&2 || true; die "could not start PostgreSQL in $DIR"; }
}

cmd_stop() {
  running || return 0
  as_pg "$PGBIN/pg_ctl" -D "$DIR/data" -m fast -w -t 60 -s stop
}

cmd_psql() {
  PGHOST=$(sock_dir) PGUSER=$(id -un) PGDATABASE=postgres \
    "$PGBIN/psql" -X -v ON_ERROR_STOP=1 "$@"
}

cmd_createdb() {
  cmd_psql -q -v "db=$1" <<'EOF'
SELECT format('CREATE DATABASE %I', :'db')
WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'db') \gexec
EOF
}

# Quote a conninfo value only when it needs it.
cq() {
  case "$1" in
    ''|*[[:space:]\'\\]*) local v=${1//\\/\\\\}; printf "'%s'" "${v//\'/\\\'}" ;;
    *) printf %s "$1" ;;
  esac
}

cmd_conninfo() {
  printf 'host=%s dbname=%s user=%s\n' "$(cq "$(sock_dir)")" "$(cq "$1")" "$(cq "$(id -un)")"
}

[ $# -ge 2 ] || { sed -n '2,14s/^# \{0,1\}//p' "$0" >&2; exit 2; }
cmd=$1 DIR=$2
shift 2
case "$DIR" in /*) ;; *) DIR=$PWD/$DIR ;; esac
if [ -e "$DIR" ]; then DIR=$(readlink -f "$DIR"); fi

case "$cmd" in
  init)     cmd_init ;;
  start)    cmd_start ;;
  stop)     cmd_stop ;;
  status)   running ;;
  createdb) [ $# -eq 1 ] || die "usage: createdb DIR NAME"; cmd_createdb "$1" ;;
  conninfo) [ $# -eq 1 ] || die "usage: conninfo DIR NAME"; cmd_conninfo "$1" ;;
  socket)   sock_dir ;;
  role)     id -un ;;
  psql)     cmd_psql "$@" ;;
  pg_ctl)   as_pg "$PGBIN/pg_ctl" "$@" ;;
  *)        die "unknown command: $cmd" ;;
esac
