#!/usr/bin/env bash
# The mutant stage: idemd built with one safety mechanism deliberately
# broken at a time (CMake -DIDEMD_MUTANT=NAME: #ifdef IDEMD_MUTANT_<NAME> in
# src/, "-- mutant:NAME" lines in migrations/), and the safety tests run
# against each build until one fails. A mutant that no test catches fails
# the stage: a safety test that no broken build can fail proves nothing.
#
#   fence_resets               a new life of a key starts at attempt 1 again
#   no_fence                   complete/release/extend/checkpoint ignore the attempt
#   lease_from_txn_start       leases counted from the transaction's start
#                              (now()), not the write that grants them
#   lease_spent_acked          a claim whose lease was spent inside PostgreSQL
#                              is acknowledged anyway
#   forward_on_spent_lease     the gateway forwards however little lease is left
#   forward_uncut              a forward keeps the route's timeout even when the
#                              lease has less left
#   admit_in_progress          a claim of a record in progress under a live lease
#                              is granted as a takeover
#   takeover_judged_late       a claim is judged when PostgreSQL gets round to it,
#                              not when it came: one that waited out a lease in
#                              a stall takes the record over (migrations/0015)
#   release_after_2xx          an upstream 2xx that cannot be stored (too large,
#                              malformed) is released and so run again
#   release_after_broken_answer  an upstream answer that broke off after its
#                              final status line is released and run again
#   release_unknown_outcome    a forward that timed out or lost its connection
#                              before a status line is released at once
#   route_outlives_lease       a route whose timeout does not fit in its
#                              operation's lease is accepted (start, reload, PUT)
#   replay_ignores_expiry      the replay cache serves answers past their expiry
#   replay_db_ignores_expiry   the database's replay serves answers past expiry
#   complete_ignores_expiry    the plain-SQL complete completes an ended record
#   complete_fn_ignores_expiry idemd.complete completes an ended record
#                              (tests/mutants/complete_fn_ignores_expiry.sql)
#   checkpoint_unfenced        a checkpoint from a stale attempt is stored
#                              (tests/mutants/checkpoint_unfenced.sql)
#   batch_twins                claims of one record that meet in one batch
#                              all take the plain-SQL insert
#   told_events_lost           the end of a life drops the claimed and completed
#                              events its record told (migrations/0013, 0018)
#   told_events_lost_on_delete the deletion of a live record drops them
#   told_events_unfiltered     the trail shows told events past the retention
#                              they were given (migrations/0014)
#   event_rows_unfiltered      the trail shows event rows past their retention
#                              until the sweep deletes them (migrations/0016)
#   clock_offset_ignored       the database's clock is never measured: expiry,
#                              leases and the replay cache follow the host's
#   replay_ignores_fingerprint the replay cache answers a request with another
#                              request's answer (its fingerprint not compared)
#   resend_allowed             libcurl may resend a request on a fresh connection
#                              after a reused one closed without an answer
#   fences_swept_at_once       the sweep deletes a fence at its next pass, not
#                              fence_retention_seconds after its life ended
#                              (migrations/0017, 0018)
#   new_life_swept_late        a new life of a fenced key is swept when the
#                              fence would have been deleted, not at its end
#                              (migrations/0019)
#   unstorable_kept_long       an upstream refusal too large to store is kept
#                              (as its 502) for the operation's retention, not
#                              the refusal's error_retention_seconds
#   connections_per_address    max_connections_per_ip counts each address, not
#                              each client (an IPv6 prefix of
#                              ipv6_client_prefix bits)
#   listing_unshared           one tenant runs any number of listings and
#                              event pages at once (max_listing_per_tenant)
#   listing_on_worker          a listing's statement runs on the HTTP worker
#                              that took it, not on a reader thread
#   holder_unfenced            a gateway record whose holder lives is taken
#                              over at its lease's end (migrations/0020)
#   lease_below_route_needs    a lease a live instance's route cannot fit is
#                              accepted (PUT on another instance, 0020)
#   deadline_unsent            the upstream is told no Idempotency-Deadline,
#                              only a timeout it counts from its late read
#   told_whole_timeout         the upstream is told the route's whole
#                              timeout_ms, not what the lease leaves
#   batch_cut_forgets          a batch whose second statement fails reruns
#                              the items its first statement decided
#   clock_steps_seen           idemd's clock follows the host's wall clock
#                              between measurements, so a step counts
#   complete_batch_unfenced    a completion of several records in one
#                              statement ignores the attempt
#   release_on_close           a forward whose connection closed before any
#                              status line releases the key at once
#
# A mechanism inside a function of a migration that deployments already
# applied (its text is fixed by its checksum) is broken by a copy of that
# function, tests/mutants/NAME.sql, applied after every migration; this
# script first checks that each copy is its migration's function but for
# the lines marked "-- was:".
#
# Needs the PostgreSQL cluster of tests/run.sh (IDEMD_TEST_PGHOST etc.).
# One build tree (build-mutant) for all: switching mutants recompiles only
# the files holding a mutant point. Prints a table mutant -> the test that
# caught it; ends with "mutants: N of N caught".
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
DIR=${IDEMD_MUTANT_BUILD:-$ROOT/build-mutant}
PY=${PYTHON:-python3}

# The safety tests, fastest and most pointed first. Each mutant runs the
# test that pins its mechanism first, then the others in this order until
# one fails.
SAFETY=(test_corners test_broken_upstream test_exactly_once test_holder_fence test_claims
        test_concurrency test_long_work test_keys test_gateway test_scenarios test_audit
        test_hostile_tenants)
# The test case that pins each mutant's mechanism (FILE:Class.case), run
# alone first: a pointed case takes seconds where its whole file takes a
# minute; should it not catch the mutant, the whole files follow.
pointed() {
  case "$1" in
    fence_resets) echo test_exactly_once:Exact.test_expired_record_is_gone_for_every_reader ;;
    no_fence) echo test_exactly_once:Lives.test_stalled_holder_of_a_swept_life_is_fenced ;;
    lease_from_txn_start) echo test_corners:Leases.test_second_claim_after_a_lock_wait_gets_a_whole_lease ;;
    lease_spent_acked) echo test_exactly_once:Lives.test_claim_is_never_acknowledged_with_a_spent_lease ;;
    forward_on_spent_lease) echo test_corners:Leases.test_gateway_does_not_forward_on_a_lease_left_too_short ;;
    forward_uncut) echo test_corners:Leases.test_forward_is_cut_to_what_the_lease_has_left ;;
    admit_in_progress) echo test_exactly_once:Lives.test_stalled_holder_of_a_swept_life_is_fenced ;;
    takeover_judged_late) echo test_corners:Leases.test_claim_that_waited_past_the_lease_does_not_take_over ;;
    release_after_2xx) echo test_exactly_once:Lives.test_unstorable_success_is_not_executed_again ;;
    release_after_broken_answer) echo test_broken_upstream:BrokenAnswers.test_answer_stalled_past_the_timeout_is_not_run_again ;;
    release_unknown_outcome) echo test_broken_upstream:BrokenAnswers.test_connection_broken_before_an_answer_keeps_the_key ;;
    route_outlives_lease) echo test_broken_upstream:RouteOutlivesLease.test_refused_at_start_and_at_reload ;;
    replay_ignores_expiry) echo test_exactly_once:Exact.test_expired_record_is_gone_for_every_reader ;;
    replay_db_ignores_expiry) echo test_corners:Records.test_ended_answer_is_not_replayed_from_the_database ;;
    complete_ignores_expiry) echo test_corners:Records.test_complete_after_the_life_ended_is_lease_lost ;;
    complete_fn_ignores_expiry) echo test_corners:Records.test_complete_after_the_life_ended_is_lease_lost ;;
    checkpoint_unfenced) echo test_corners:Records.test_checkpoint_of_a_taken_over_attempt_is_refused ;;
    batch_twins) echo test_corners:Records.test_claims_of_one_new_key_in_one_batch_grant_it_once ;;
    told_events_lost) echo test_audit:Audit.test_a_new_life_of_a_fenced_key_ends_at_its_own_expiry ;;
    told_events_lost_on_delete) echo test_corners:Records.test_a_deleted_live_record_keeps_its_told_events ;;
    told_events_unfiltered) echo test_broken_upstream:RetentionKept.test_changing_the_audit_retention_never_hides_drops_or_revives ;;
    event_rows_unfiltered) echo test_audit:HeldSweep.test_an_event_row_past_its_retention_is_not_shown ;;
    clock_offset_ignored) echo test_exactly_once:OneClock.test_host_clock_behind_never_replays_what_the_database_ended ;;
    replay_ignores_fingerprint) echo test_claims:Claims.test_fingerprint_mismatch_string ;;
    resend_allowed) echo test_corners:Resend.test_a_dropped_request_is_not_resent ;;
    fences_swept_at_once) echo test_exactly_once:Lives.test_fence_outlives_the_sweeps_until_its_retention ;;
    new_life_swept_late) echo test_audit:Audit.test_a_new_life_of_a_fenced_key_ends_at_its_own_expiry ;;
    unstorable_kept_long) echo test_hostile_tenants:HostileTenants.test_unstorable_refusal_keeps_a_refusals_retention ;;
    connections_per_address) echo test_hostile_ipv6:ConnectionsPerPrefix.test_one_prefix_holds_one_clients_connections ;;
    listing_unshared) echo test_hostile_tenants:HostileTenants.test_one_tenants_listings_leave_the_others_a_share ;;
    listing_on_worker) echo test_hostile_tenants:ListingWorkers.test_listings_held_in_postgresql_leave_the_workers_free ;;
    holder_unfenced) echo test_holder_fence:Fence.test_completion_stalled_past_the_lease_keeps_the_key ;;
    lease_below_route_needs) echo test_holder_fence:Fence.test_lease_shortened_elsewhere_is_refused ;;
    deadline_unsent) echo test_holder_fence:Fence.test_late_reading_upstream_never_runs_beside_a_retry ;;
    told_whole_timeout) echo test_holder_fence:Fence.test_upstream_is_told_the_cut_deadline ;;
    batch_cut_forgets) echo test_holder_fence:Fence.test_batch_cut_inside_the_database_keeps_its_fresh_claims ;;
    clock_steps_seen) echo test_holder_fence:ClockStep.test_clock_stepping_back_never_serves_an_ended_record ;;
    complete_batch_unfenced) echo test_corners:Records.test_batch_completion_of_a_taken_over_attempt_is_refused ;;
    release_on_close) echo test_broken_upstream:BrokenAnswers.test_connection_broken_before_an_answer_keeps_the_key ;;
    *) echo test_corners ;;
  esac
}
tests_of() {
  local first t
  first=$(pointed "$1")
  echo "$first"
  for t in "${SAFETY[@]}"; do [ "$t" = "$first" ] || echo "$t"; done
}
MUTANTS=(fence_resets no_fence lease_from_txn_start lease_spent_acked forward_on_spent_lease
         forward_uncut admit_in_progress takeover_judged_late release_after_2xx
         release_after_broken_answer
         release_unknown_outcome route_outlives_lease replay_ignores_expiry
         replay_db_ignores_expiry complete_ignores_expiry complete_fn_ignores_expiry
         checkpoint_unfenced batch_twins told_events_lost told_events_lost_on_delete
         told_events_unfiltered event_rows_unfiltered clock_offset_ignored replay_ignores_fingerprint resend_allowed
         fences_swept_at_once new_life_swept_late unstorable_kept_long connections_per_address listing_unshared listing_on_worker
         holder_unfenced lease_below_route_needs deadline_unsent told_whole_timeout
         batch_cut_forgets clock_steps_seen complete_batch_unfenced release_on_close)
if [ -n "${IDEMD_MUTANTS:-}" ]; then read -r -a MUTANTS <<<"$IDEMD_MUTANTS"; fi

# Each function copy is its migration's function, but for its "-- was:" lines.
for f in tests/mutants/*.sql; do
  if ! "$PY" - "$f" <<'PYEOF'
import re, sys
path = sys.argv[1]
lines = open(path).read().split("\n")
m = re.match(r"-- mutant of (migrations/\S+): (\S+)$", lines[0])
if not m:
    sys.exit("%s: its first line must say '-- mutant of migrations/FILE: FUNCTION'" % path)
src, fn = m.groups()
body = [l for l in lines if not l.startswith("-- ")]
while body and body[-1] == "":
    body.pop()
orig = [l.split("  -- was: ", 1)[1] if "  -- was: " in l else l for l in body]
text = open(src).read().split("\n")
head = "CREATE OR REPLACE FUNCTION %s(" % fn
starts = [i for i, l in enumerate(text) if l.startswith(head)]
if not starts:
    sys.exit("%s: %s defines no %s" % (path, src, fn))
i = starts[-1]
j = text.index("$$;", i)
if text[i:j + 1] != orig:
    sys.exit("%s: %s's %s changed; copy it again" % (path, src, fn))
import glob, os
later = [g for g in sorted(glob.glob("migrations/*.sql")) if g > src and head in open(g).read()]
if later:
    sys.exit("%s: %s redefines %s; copy that one" % (path, later[0], fn))
PYEOF
  then echo "mutants.sh: $f is stale" >&2; exit 1; fi
done

if [ -z "${IDEMD_TEST_PGHOST:-}" ]; then
  echo "mutants.sh: IDEMD_TEST_PGHOST is not set (run from tests/run.sh)" >&2; exit 1
fi
TMP=$(mktemp -d /tmp/idemd-mutants.XXXXXX) || exit 1
trap 'rm -rf "$TMP"' EXIT

caught=0 table=()
for m in "${MUTANTS[@]}"; do
  printf '\n==> mutant %s: building\n' "$m"
  if ! { cmake -S . -B "$DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIDEMD_MUTANT="$m" \
           >"$TMP/cmake.log" 2>&1 && cmake --build "$DIR" -j2 --target idemd >"$TMP/build.log" 2>&1; }; then
    cat "$TMP/cmake.log" "$TMP/build.log" >&2
    table+=("$m|BUILD FAILED"); continue
  fi
  by=""
  for t in $(tests_of "$m"); do
    # FILE, or FILE:CASE for the one test case that pins the mechanism
    file=${t%%:*} only=()
    if [ "$file" != "$t" ]; then only=("${t#*:}"); fi
    printf '    %s ... ' "$t"
    if IDEMD_BIN="$DIR/idemd" IDEMD_SOURCE_DIR="$ROOT" timeout 300 \
         "$PY" "tests/integration/$file.py" "${only[@]}" --failfast >"$TMP/$m.$file.log" 2>&1; then
      echo "passed (did not notice)"
    else
      echo "FAILED: caught"
      # the failing test cases, for the table
      cases=$(grep -oE '^(FAIL|ERROR): [a-z_0-9]+' "$TMP/$m.$file.log" | sed -E 's/^(FAIL|ERROR): //' |
              sort -u | head -n 3 | paste -sd, -)
      by="$file${cases:+ ($cases)}"
      break
    fi
  done
  if [ -n "$by" ]; then
    caught=$((caught + 1)); table+=("$m|$by")
  else
    table+=("$m|NOT CAUGHT")
  fi
done
# the tree is left as a plain build, so that nothing mistakes it for a release
cmake -S . -B "$DIR" -DIDEMD_MUTANT= >/dev/null 2>&1

printf '\n%-28s %s\n' "mutant" "caught by"
for row in "${table[@]}"; do printf '%-28s %s\n' "${row%%|*}" "${row#*|}"; done
echo "mutants: $caught of ${#MUTANTS[@]} caught"
[ "$caught" -eq "${#MUTANTS[@]}" ]
