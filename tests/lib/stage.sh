# The start that tests/clients.sh, tests/prometheus.sh and tests/contract.sh
# share; sourced from the checkout's root after they set ROOT (the checkout).
#
#   stage_start NAME   makes TMP, a private folder /tmp/idemd-NAME.XXXXXX
#                      (0711), sources tests/lib/pg.sh, empties pids (the
#                      script's background processes) and traps EXIT to kill
#                      every process in pids, reap them, run pg_cleanup and
#                      remove TMP; INT and TERM exit 130 and 143. Returns 1
#                      when TMP cannot be made.

stage_start() {
  TMP=$(mktemp -d "/tmp/idemd-$1.XXXXXX") || return 1
  chmod 711 "$TMP"
  # shellcheck source=tests/lib/pg.sh
  . tests/lib/pg.sh
  pids=()
  trap stage_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

# shellcheck disable=SC2317
stage_cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  pg_cleanup
  rm -rf "$TMP"
}
