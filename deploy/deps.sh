#!/usr/bin/env bash
# Installs the Debian 12 packages idemd needs to build and run (and, with
# --test, to run its test suite; --no-browser leaves out chromium and its
# fonts, needed only by the headless browser test). Does nothing when
# everything is present; when not root, prints the apt-get command to run
# instead.
set -euo pipefail

pkgs=(build-essential cmake pkg-config libmicrohttpd-dev libpq-dev
      libsodium-dev libjansson-dev libcmocka-dev libcurl4-openssl-dev
      postgresql-15 postgresql-client-15 python3 curl)
test_pkgs=(clang clang-format libclang-rt-14-dev valgrind pgbouncer openssl
           python3-pytest mypy python3-venv python3-setuptools python3-wheel
           rabbitmq-server python3-pika prometheus jq
           patroni python3-etcd etcd-server etcd-client haproxy)
browser_pkgs=(chromium fonts-liberation)
# the model-based test of the state machine (tests/integration/test_model.py)
test_pkgs+=(python3-hypothesis)
# an idemd whose clock is off (tests/integration/test_exactly_once.py, and
# the history checker's second instance: tests/checker/run.py)
test_pkgs+=(libfaketime)

test=0 browser=1
for arg in "$@"; do
  case "$arg" in
    --test) test=1 ;;
    --no-browser) browser=0 ;;
    -h|--help) echo "usage: $0 [--test [--no-browser]]"; exit 0 ;;
    *) echo "deps.sh: unknown option: $arg" >&2; exit 2 ;;
  esac
done
if [ "$test" = 1 ]; then
  pkgs+=("${test_pkgs[@]}")
  # tests/package.sh (dpkg-shlibdeps) and test_upgrade.py (git archive)
  pkgs+=(git dpkg-dev)
  if [ "$browser" = 1 ]; then pkgs+=("${browser_pkgs[@]}"); fi
  # Node.js and npm may come from another source than Debian's packages;
  # only ask for Debian's when the commands are missing.
  command -v node >/dev/null 2>&1 || pkgs+=(nodejs)
  command -v npm >/dev/null 2>&1 || pkgs+=(npm)
  # the JVM client (clients/jvm, Maven, Java 17 bytecode): the same rule
  command -v mvn >/dev/null 2>&1 || pkgs+=(maven)
  command -v javac >/dev/null 2>&1 || pkgs+=(openjdk-17-jdk-headless)
  # the Go client needs Go 1.22 or newer, which Debian 12 does not package:
  # tests/clients.sh says so and fails when go is missing
fi

missing=()
for p in "${pkgs[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [ "$status" = installed ] || missing+=("$p")
done
[ "${#missing[@]}" -eq 0 ] && exit 0

cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "deps.sh: missing packages: ${missing[*]}" >&2
  echo "deps.sh: run as root:  apt-get update && DEBIAN_FRONTEND=noninteractive $cmd" >&2
  exit 1
fi
echo "deps.sh: installing ${missing[*]}" >&2
# idemd runs its own private clusters: keep the packages from creating and
# starting a system PostgreSQL cluster or a pgbouncer service.
if [ ! -e /etc/postgresql-common/createcluster.conf ]; then
  mkdir -p /etc/postgresql-common
  echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.conf
fi
policy=
if [ ! -e /usr/sbin/policy-rc.d ]; then
  policy=/usr/sbin/policy-rc.d
  printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 755 "$policy"
fi
trap '[ -z "$policy" ] || rm -f "$policy"' EXIT
apt-get update -qq
DEBIAN_FRONTEND=noninteractive $cmd
