#!/usr/bin/env bash
# The walk of a token claim and of a gateway submit through idemd's code,
# counted from a record of every call: idemd built with -pg (build-walk),
# run under uftrace by bench/walk/scenario.py on the PostgreSQL of
# tests/run.sh (IDEMD_TEST_PGHOST etc.), and the record read by walk.py.
# Prints, for each, its stays, files and climbs (walk.py says what those
# are). Not part of CI: it measures ARCHITECTURE.md's figures on request.
#
#   bench/walk/walk.sh [TREE]    TREE: another checkout to measure (default:
#                                this one), e.g. a git worktree of an older
#                                commit for a before/after
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TREE=$(cd "${1:-$ROOT}" && pwd)
command -v uftrace >/dev/null || apt-get install -y -qq uftrace >/dev/null
: "${IDEMD_TEST_PGHOST:?the PostgreSQL of tests/run.sh (IDEMD_TEST_PGHOST etc.)}"
BUILD=$TREE/build-walk
cmake -S "$TREE" -B "$BUILD" -DCMAKE_BUILD_TYPE=Debug -DIDEMD_WERROR=OFF \
  -DCMAKE_C_FLAGS="-pg -fno-omit-frame-pointer" >/dev/null
cmake --build "$BUILD" -j2 --target idemd >/dev/null
WORK=$(mktemp -d /tmp/idemd-walk.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cat >"$WORK/idemd" <<EOS
#!/bin/sh
case " \$* " in
  *" serve "*) exec uftrace record --no-libcall -d "$WORK/trace" "$BUILD/idemd" "\$@" ;;
  *) exec "$BUILD/idemd" "\$@" ;;
esac
EOS
chmod +x "$WORK/idemd"
IDEMD_BIN=$WORK/idemd IDEMD_SOURCE_DIR=$ROOT python3 "$HERE/scenario.py" 2>"$WORK/scenario.log" ||
  { cat "$WORK/scenario.log" >&2; exit 1; }
python3 "$HERE/walk.py" "$WORK/trace" "$BUILD/idemd" "$TREE" h_token_claim gateway_submit
