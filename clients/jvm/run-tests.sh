#!/usr/bin/env bash
# Builds and tests the JVM clients (clients/jvm, Maven, Java 17) against a
# real idemd: the core client's tests and the shared conformance scenarios,
# the OkHttp interceptor's mobile-checkout test, the Spring Boot starter in
# an embedded Tomcat, and the examples of docs/clients/jvm.md.
#
# Called by tests/clients.sh with IDEMD_URL, IDEMD_LIMITED_URL,
# IDEMD_API_KEY, IDEMD_API_KEY_2, IDEMD_GATEWAY_URL, IDEMD_UPSTREAM_PORT and
# IDEMD_SOURCE_DIR exported. Maven's repository is build/m2 under the
# repository root (a rerun downloads nothing); the libraries' artifacts are
# installed there, and the modules that use them resolve them from it.
# Prints "jvm artifacts: ..." (what was installed), one line per
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
mvnq() { timeout 600 mvn -B -q -Dstyle.color=never -Dmaven.repo.local="$M2" "$@"; }
# The modules are built as a user's application gets them, from a Maven
# repository ($M2): first the parent POM and the core client (its tests and
# the conformance scenarios, then its jar, -sources.jar and -javadoc.jar
# installed); then the OkHttp interceptor and the Spring Boot starter, whose
# builds and tests resolve idemd-client from $M2 (it is not in their
# reactor) and which are installed in turn; then the examples, which
# resolve all three from $M2. A previous run's artifacts are removed first,
# so that nothing resolves a stale jar. A failing step stops the next ones.
rm -rf "$M2/dev/idemd"
mvnq install -pl :idemd-parent,:idemd-client &&
  mvnq install -pl :idemd-okhttp,:idemd-spring-boot-starter &&
  mvnq test -pl :idemd-examples
rc=$?

# What the install put into $M2: each module's jar, -sources.jar,
# -javadoc.jar and POM, and the parent POM's metadata.
if [ "$rc" -eq 0 ]; then
  python3 - "$M2" <<'PY' || rc=1
import os, sys, xml.etree.ElementTree as ET
m2, ns = sys.argv[1], {"m": "http://maven.apache.org/POM/4.0.0"}
d = os.path.join(m2, "dev", "idemd")
bad, n = [], 0
parent = ET.parse(os.path.join(d, "idemd-parent", "0.1.0", "idemd-parent-0.1.0.pom")).getroot()
version = parent.findtext("m:version", namespaces=ns)
for tag in ["name", "description", "url", "licenses/m:license/m:name",
            "licenses/m:license/m:url", "developers/m:developer/m:name"]:
    if not (parent.findtext("m:" + tag, namespaces=ns) or "").strip():
        bad.append(f"idemd-parent POM: no {tag.replace('m:', '')}")
for a in ["idemd-client", "idemd-okhttp", "idemd-spring-boot-starter"]:
    base = os.path.join(d, a, version, f"{a}-{version}")
    for suffix in [".pom", ".jar", "-sources.jar", "-javadoc.jar"]:
        if os.path.getsize(base + suffix) if os.path.exists(base + suffix) else 0:
            n += 1
        else:
            bad.append(f"{a}: no {os.path.basename(base + suffix)}")
    if os.path.exists(base + ".pom"):
        pom = ET.parse(base + ".pom").getroot()
        for tag in ["name", "description"]:
            if not (pom.findtext("m:" + tag, namespaces=ns) or "").strip():
                bad.append(f"{a} POM: no {tag}")
print(f"jvm artifacts: {n} files of 3 modules in the local repository" +
      ("" if not bad else "; " + "; ".join(bad)))
sys.exit(1 if bad else 0)
PY
fi

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
