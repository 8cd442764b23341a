#!/usr/bin/env bash
# Runs one of the browser-side test files with node's test runner:
#   run.sh helper     clients/node/src/browser.js in node against a scripted server
#   run.sh checkout   examples/checkout in headless Chromium (playwright-core):
#                     installs Debian's chromium when it is missing (as root)
#                     and playwright-core into build/node-browser (pinned).
# Environment (set by ctest): IDEMD_BIN, CHECKOUT_SHOP_BIN, IDEMD_SOURCE_DIR,
# IDEMD_ARTIFACTS_DIR, and the throwaway PostgreSQL of tests/run.sh
# (IDEMD_TEST_PGHOST, IDEMD_TEST_PGUSER). Never skips: anything missing fails.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=${IDEMD_SOURCE_DIR:-$(cd "$HERE/../.." && pwd)}
PLAYWRIGHT_VERSION=1.65.1

die() { echo "tests/browser/run.sh: $*" >&2; exit 1; }

command -v node >/dev/null || die "node is missing (apt-get install nodejs npm)"

case "${1:-}" in
  helper)
    exec node --test --test-reporter=spec "$HERE/helper.test.mjs" ;;
  checkout) ;;
  *) echo "usage: $0 helper|checkout" >&2; exit 2 ;;
esac

CHROMIUM=${IDEMD_CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$CHROMIUM" ]; then
  [ "$(id -u)" -eq 0 ] || die "$CHROMIUM is missing; run as root: apt-get install chromium"
  echo "tests/browser/run.sh: installing Debian's chromium" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
  [ -x "$CHROMIUM" ] || die "chromium did not install"
fi

export IDEMD_NODE_DIR=${IDEMD_NODE_DIR:-$SRC/build/node-browser}
mkdir -p "$IDEMD_NODE_DIR"
(
  flock 9
  if ! grep -qs "\"version\": \"$PLAYWRIGHT_VERSION\"" \
       "$IDEMD_NODE_DIR/node_modules/playwright-core/package.json"; then
    PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --prefix "$IDEMD_NODE_DIR" --no-audit \
      --no-fund --loglevel=error "playwright-core@$PLAYWRIGHT_VERSION" >&2
  fi
) 9>"$IDEMD_NODE_DIR/.lock" || die "npm install playwright-core@$PLAYWRIGHT_VERSION failed"

export IDEMD_CHROMIUM=$CHROMIUM
exec node --test --test-reporter=spec --test-concurrency=1 "$HERE/checkout.test.mjs"
