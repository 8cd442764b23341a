#!/usr/bin/env bash
# Builds and tests the JVM clients (clients/jvm, Maven, Java 17) against a
# real idemd: the core client's tests and the shared conformance scenarios,
# the OkHttp interceptor's mobile-checkout test, the Spring Boot starter in
# an embedded Tomcat, and the examples of docs/clients/jvm.md.
#
# Called by tests/clients.sh with IDEMD_URL, IDEMD_LIMITED_URL,
# IDEMD_API_KEY, IDEMD_API_KEY_2, IDEMD_GATEWAY_URL, IDEMD_UPSTREAM_PORT and
# IDEMD_SOURCE_DIR exported. Maven's repository is build/m2 under the
# repository root (a rerun downloads nothing). Prints one line per
# conformance scenario, the mobile test's figures and, last,
# "jvm: N passed, N failed"; exits non-zero on any failure or skipped test.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
M2=${IDEMD_M2:-$ROOT/build/m2}

for v in IDEMD_URL IDEMD_LIMITED_URL IDEMD_API_KEY IDEMD_API_KEY_2 IDEMD_GATEWAY_URL IDEMD_UPSTREAM_PORT; do
  if [ -z "${!v:-}" ]; then echo "run-tests.sh: $v is not set" >&2; exit 2; fi
done
export IDEMD_SOURCE_DIR=${IDEMD_SOURCE_DIR:-$ROOT}
command -v mvn >/dev/null || { echo "run-tests.sh: mvn not found (apt-get install maven openjdk-17-jdk-headless)" >&2; exit 2; }

cd "$HERE" || exit 1
rm -rf ./*/target/surefire-reports ./*/target/conformance.txt ./*/target/mobile-figures.txt
mkdir -p "$M2"
# -q: Maven prints failures and the tests' own lines only.
timeout 600 mvn -B -q -Dstyle.color=never -Dmaven.repo.local="$M2" test
rc=$?

echo
if [ -f idemd-client/target/conformance.txt ]; then
  sed 's/^/conformance: /' idemd-client/target/conformance.txt
fi
cat idemd-okhttp/target/mobile-figures.txt 2>/dev/null
# Surefire's totals over every module.
read -r tests failures errors skipped < <(python3 - ./*/target/surefire-reports/TEST-*.xml <<'PY'
import sys, xml.etree.ElementTree as ET
t = f = e = s = 0
for p in sys.argv[1:]:
    try:
        r = ET.parse(p).getroot()
    except Exception:
        continue
    t += int(r.get("tests", 0)); f += int(r.get("failures", 0))
    e += int(r.get("errors", 0)); s += int(r.get("skipped", 0))
print(t, f, e, s)
PY
)
tests=${tests:-0} failures=${failures:-0} errors=${errors:-0} skipped=${skipped:-0}
failed=$((failures + errors))
passed=$((tests - failed - skipped))
if [ "$skipped" -gt 0 ]; then
  echo "jvm: $passed passed, $failed failed, $skipped skipped"
else
  echo "jvm: $passed passed, $failed failed"
fi
if [ "$rc" -ne 0 ] || [ "$failed" -ne 0 ] || [ "$skipped" -ne 0 ] || [ "$tests" -eq 0 ]; then
  [ "$rc" -ne 0 ] && echo "jvm: mvn exited $rc" >&2
  exit 1
fi
