"""Integration test: the first submit's plain-SQL statements (the claim,
the completion, and the claim and completion of a batch of one) keep one plan at every
batch size, a completion finds its record by primary key however many
others are in progress, and writes no index entry.

The statements are idemd's own: their texts are read out of the binary
(each is one string constant of src/store/store.c), prepared in a psql
session as idemd's pooled connections prepare them, and run there inside
transactions that are rolled back. The figures are counts, not times:
plans made against executions (pg_prepared_statements' custom_plans and
generic_plans) and the buffers a completion reads (EXPLAIN (ANALYZE,
BUFFERS)).

- One plan: PostgreSQL plans the first five executions of a prepared
  statement for their parameters (custom plans), then keeps the generic
  plan if it costs no more than those did. A claim planned for the length
  of its arrays made a cheaper custom plan for a batch of one than its
  generic plan (costed for ten): it was planned at every call (32 of 32
  here). Now 5 of 32, the first five.
- By primary key: with its statistics taken while few records were in
  progress, completing one record beside 20,000 others in progress walked
  the partial index records_in_progress_lease_idx (0010, dropped by 0017)
  through all of them: 921 buffers instead of 20 alone. It must stay
  within twice the cost of completing it alone, through the primary key
  only.
- No index entry: a completion is a HOT update (migrations/0017), unless
  it ends the record's life earlier than its claim said."""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import IdemdCase, psql  # noqa: E402

OTHERS = 20000       # records in progress beside the one completed
COMPLETED = 5000     # completed records when the statistics are taken
CALLS = 32           # executions of a prepared statement in the plan count
TENANT = 900001      # records of a tenant of the test's own (records has no foreign keys)

# Each statement is the one NUL-terminated string of the binary that
# starts with the first text and holds the others.
CLAIM_FRESH = (b"WITH x AS (", b"AS x(tenant, id, op, subject, fp, expires, lease, by, "
               b"audit, retention, holder, i)",
               b"ON CONFLICT (tenant_id, token_id) DO NOTHING")
# the same claim for a batch of one (claim_one)
CLAIM_ONE = (b"WITH x AS (", b"($9::int[])[1] AS audit", b"ON CONFLICT (tenant_id, token_id) DO NOTHING")
COMPLETE_CURRENT = (b"WITH u AS (", b"AS x(tenant, id, attempt, status, headers, body, "
                    b"is_json, retention, by, audit, i)", b"UPDATE records rec")
# the same completion for a batch of one (complete_one)
COMPLETE_ONE = (b"WITH u AS (", b"($10::int[])[1] AS audit", b"UPDATE records rec")
COMPLETIONS = (("complete_current", COMPLETE_CURRENT), ("complete_one", COMPLETE_ONE))


def statement(marks):
    with open(harness.BIN, "rb") as f:
        data = f.read()
    found = []
    at = data.find(marks[0])
    while at >= 0:
        end = data.find(b"\0", at)
        text = data[at:end]
        if all(m in text for m in marks[1:]):
            found.append(text.decode())
        at = data.find(marks[0], end)
    if len(found) != 1:
        raise AssertionError("%d strings of %s look like %r" % (len(found), harness.BIN, marks[1]))
    return found[0]


def session(db, script):
    """Runs SCRIPT in one psql session; its output, unaligned."""
    p = subprocess.run([harness.PSQL, "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", db,
                        "-f", "-"], input=script, env=harness.pg_env(),
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise AssertionError("psql failed (%d): %s" % (p.returncode, p.stderr[-2000:]))
    return p.stdout


def arr(items):
    return "'{%s}'" % ",".join(items)


def token(n):
    return '"\\\\x%032x"' % n


def claim_args(first, n, expires=4102444800):
    ids = [token(first + k) for k in range(n)]
    return ", ".join([arr(["%d" % TENANT] * n), arr(ids), arr(["1"] * n), arr(["u"] * n),
                      arr(["NULL"] * n), arr(["%d" % expires] * n), arr(["60"] * n),
                      arr(["test"] * n), arr(["3600"] * n), arr(["86400"] * n),
                      arr(["0"] * n)])


def complete_args(first, n, retention=86400):
    ids = [token(first + k) for k in range(n)]
    return ", ".join([arr(["%d" % TENANT] * n), arr(ids), arr(["1"] * n), arr(["200"] * n),
                      arr(['"{}"'] * n), arr(['"\\\\x"'] * n), arr(["f"] * n),
                      arr(["%d" % retention] * n), arr(["test"] * n), arr(["3600"] * n)])


ROWS = ("INSERT INTO records (tenant_id, token_id, operation_id, subject, state, attempt, "
        "lease_expires_at, response_status, token_expires_at, expires_at) "
        "SELECT %d, decode(lpad(to_hex(g), 32, '0'), 'hex'), 1, 'u', '%%s', 1, %%s, %%s, "
        "now() + interval '1 hour', now() + interval '1 hour' "
        "FROM generate_series(%%d, %%d) g;\n" % TENANT)


def in_progress(first, last):
    return ROWS % ("in_progress", "now() + interval '10 minutes'", "NULL", first, last)


def completed(first, last):
    return ROWS % ("completed", "NULL", "200", first, last)


class Plans(IdemdCase):
    start_server = False

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # a table of completed records, its statistics taken then, as in a
        # steady state; autovacuum kept out so that they stay so
        psql("ALTER TABLE records SET (autovacuum_enabled = false);"
             + completed(10 ** 9, 10 ** 9 + COMPLETED - 1) + "ANALYZE records;", db=cls.idemd.db)

    def tearDown(self):
        psql("DELETE FROM records WHERE tenant_id = %d AND state <> 'completed'" % TENANT,
             db=self.idemd.db)

    def plan_counts(self, name, text, calls):
        """Prepares TEXT as NAME, runs CALLS (SQL argument lists) in a
        transaction rolled back; (generic_plans, custom_plans)."""
        script = "PREPARE %s AS %s;\nBEGIN;\n" % (name, text)
        for args in calls:
            script += "SAVEPOINT s;\nEXECUTE %s(%s);\nROLLBACK TO s;\n" % (name, args)
        script += ("\\echo ===\nSELECT generic_plans, custom_plans FROM pg_prepared_statements "
                   "WHERE name = '%s';\nROLLBACK;\n" % name)
        out = session(self.idemd.db, script).split("===\n")[-1].strip()
        generic, custom = out.split("|")
        return int(generic), int(custom)

    def test_claim_keeps_one_plan(self):
        for name, marks, sizes, what in (
                ("claim_fresh", CLAIM_FRESH, [1] * CALLS, "batches of one"),
                ("claim_fresh", CLAIM_FRESH, [1 + k % 16 for k in range(CALLS)],
                 "batches of 1 to 16"),
                ("claim_one", CLAIM_ONE, [1] * CALLS, "batches of one")):
            calls, first = [], 1
            for n in sizes:
                calls.append(claim_args(first, n))
                first += n
            generic, custom = self.plan_counts(name, statement(marks), calls)
            self.assertEqual(generic + custom, CALLS)
            # the first five executions are always planned for their values
            self.assertLessEqual(custom, 5, "%s planned %d of %d calls (%s)"
                                 % (name, custom, CALLS, what))

    def test_completion_keeps_one_plan(self):
        psql(in_progress(1, 200), db=self.idemd.db)
        for name, marks in COMPLETIONS:
            calls, first = [], 1
            for k in range(CALLS):
                n = 1 + k % 6 if name == "complete_current" else 1
                calls.append(complete_args(first, n))
                first += n
            generic, custom = self.plan_counts(name, statement(marks), calls)
            self.assertEqual(generic + custom, CALLS)
            self.assertLessEqual(custom, 5, "%s planned %d of %d calls" % (name, custom, CALLS))

    def completion_buffers(self, rounds, name, marks):
        """Completes record 0 ROUNDS times (each rolled back) through one
        prepared completion NAME (MARKS: its text); the buffers each read,
        and the indexes the last plan used."""
        args = complete_args(0, 1)
        script = "PREPARE %s AS %s;\nBEGIN;\n" % (name, statement(marks))
        for _ in range(rounds):
            script += ("SAVEPOINT s;\n\\echo ===\nEXPLAIN (ANALYZE, BUFFERS, TIMING OFF, "
                       "FORMAT JSON) EXECUTE %s(%s);\nROLLBACK TO s;\n" % (name, args))
        script += "ROLLBACK;\n"
        out = session(self.idemd.db, script).split("===\n")[1:]
        buffers, indexes = [], set()
        for o in out:
            plan = json.loads(o)[0]
            top = plan["Plan"]
            buffers.append(top["Shared Hit Blocks"] + top["Shared Read Blocks"])
            indexes = set()
            todo = [top]
            while todo:
                node = todo.pop()
                if "Index Name" in node:
                    indexes.add(node["Index Name"])
                todo.extend(node.get("Plans", []))
            self.assertIn("Actual Rows", top)
        return buffers, indexes

    def test_completion_by_primary_key(self):
        for name, marks in COMPLETIONS:
            with self.subTest(name):
                self.completion_by_primary_key(name, marks)

    def completion_by_primary_key(self, name, marks):
        db = self.idemd.db
        psql(in_progress(0, 0), db=db)
        # 7 rounds: the first five planned for their values, then the
        # generic plan (made at the sixth) twice
        alone, _ = self.completion_buffers(7, name, marks)
        psql(in_progress(1, OTHERS), db=db)
        crowded, indexes = self.completion_buffers(7, name, marks)
        psql("ANALYZE records", db=db)
        analyzed, _ = self.completion_buffers(7, name, marks)
        psql("DELETE FROM records WHERE tenant_id = %d AND state <> 'completed'; "
             "ANALYZE records" % TENANT, db=db)
        base = sorted(alone)[len(alone) // 2]
        for what, got in (("with %d others in progress" % OTHERS, crowded),
                          ("with them, after ANALYZE", analyzed)):
            self.assertLessEqual(max(got[1:]), 2 * base,
                                 "%s: completing one record %s read %s buffers, alone %s"
                                 % (name, what, got, alone))
        self.assertEqual(indexes, {"records_pkey"})

    def test_completion_writes_no_index_entry(self):
        for name, marks in COMPLETIONS:
            with self.subTest(name):
                self.completion_is_hot(name, marks)

    def completion_is_hot(self, name, marks):
        """Claims N records through claim_one (a token valid for two
        minutes, as on a token route) and completes them through NAME (kept
        a day), each in a transaction of its own: the completions are HOT
        updates, all but at most two (one whose page has no room left
        before PostgreSQL prunes it is not); with the indexes of migrations
        0010 and 0011 none was. One more completion, kept an exact 5 s, is
        not HOT: it moves its record's sweep_at to its end (0017)."""
        n, first = 20, 5 * 10 ** 8
        expires = int(time.time()) + 120
        counts = ("SELECT pg_stat_force_next_flush();\n\\o\n\\echo ===\n"
                  "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
                  "WHERE relid = 'records'::regclass;\n\\o /dev/null\n")
        script = "\\o /dev/null\nPREPARE claim_one AS %s;\nPREPARE %s AS %s;\n" % (
            statement(CLAIM_ONE), name, statement(marks))
        for k in range(n + 1):
            script += "EXECUTE claim_one(%s);\n" % claim_args(first + k, 1, expires)
        script += counts
        for k in range(n):
            script += "EXECUTE %s(%s);\n" % (name, complete_args(first + k, 1))
        script += counts
        script += "EXECUTE %s(%s);\n" % (name, complete_args(first + n, 1, -1 - 5))
        script += counts
        script += ("\\o\n\\echo ===\nSELECT sweep_at = expires_at, "
                   "expires_at < now() + interval '6 seconds' FROM records "
                   "WHERE tenant_id = %d AND token_id = decode('%032x', 'hex');\n"
                   "DELETE FROM records WHERE tenant_id = %d AND token_id >= decode('%032x', 'hex')"
                   " AND token_id <= decode('%032x', 'hex');\n"
                   % (TENANT, first + n, TENANT, first, first + n))
        out = [o.split() for o in session(self.idemd.db, script).split("===\n")[1:]]
        (u0, h0), (u1, h1), (u2, h2) = [map(int, o[0].split("|")) for o in out[:3]]
        self.assertEqual(u1 - u0, n, "%s: %d completions updated %d rows" % (name, n, u1 - u0))
        self.assertGreaterEqual(h1 - h0, n - 2, "%s: %d of %d completions were HOT"
                                % (name, h1 - h0, n))
        self.assertEqual((u2 - u1, h2 - h1), (1, 0),
                         "%s: a completion kept an exact time: updated, HOT" % name)
        self.assertEqual(out[3][0], "t|t", "%s: its sweep_at is its expires_at, 5 s on" % name)


if __name__ == "__main__":
    harness.main()
