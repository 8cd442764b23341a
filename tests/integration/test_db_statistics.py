"""Integration test: idemd brings the statistics of its hot tables up to
date when autovacuum has fallen far behind.

Each pooled connection keeps its plans of the claim and completion
statements until a table's statistics change; plans made while `records`
was empty read all of it once it is large (a fresh deployment's first
submits slowed from 2,850 to 910 a second as the table grew to 100,000
rows before autovacuum's first ANALYZE). The janitor ANALYZEs records and
record_events when they changed by more rows since their statistics than
they held then. Here autovacuum is off for records, as when it is busy
elsewhere, and the test waits for idemd's own ANALYZE."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import IdemdCase, psql  # noqa: E402

ROWS = 3000          # past the janitor's 1,000 rows, on a table that held none
WAIT = 40.0          # the janitor checks every 15 s; statistics reach the view within a second


class Statistics(IdemdCase):
    def stats(self):
        return psql("SELECT n_mod_since_analyze, last_analyze IS NOT NULL, "
                    "last_autoanalyze IS NOT NULL FROM pg_stat_user_tables "
                    "WHERE relname = 'records'", db=self.idemd.db).strip()

    def test_stale_statistics_are_refreshed(self):
        db = self.idemd.db
        op = self.put_operation()
        psql("ALTER TABLE records SET (autovacuum_enabled = false)", db=db)
        # a few submits through idemd first: its connections make their
        # plans while the table is (nearly) empty
        for _ in range(6):
            t = self.issue(op)
            self.claim_ok(t, {"fingerprint": "f"})
        self.assertIn("|f|f", self.stats(), "records was analyzed before the test's rows")
        psql("INSERT INTO records (tenant_id, token_id, operation_id, subject, state, "
             "attempt, lease_expires_at, token_expires_at, expires_at) "
             "SELECT o.tenant_id, decode(lpad(to_hex(g), 32, '0'), 'hex'), o.id, 'u', "
             "'in_progress', 1, now() + interval '1 minute', now() + interval '1 hour', "
             "now() + interval '1 hour' FROM operations o, generate_series(1, %d) g "
             "WHERE o.name = '%s'" % (ROWS, op), db=db)
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            n_mod, analyzed, auto = self.stats().split("|")
            if analyzed == "t":
                break
            time.sleep(0.5)
        self.assertEqual(analyzed, "t", "idemd did not ANALYZE records within %.0f s (%s)"
                         % (WAIT, self.stats()))
        self.assertEqual(auto, "f", "autovacuum analyzed records though it was off for it")
        self.assertLess(int(n_mod), ROWS, "the statistics do not count the inserted rows")
        # the statistics view may show the ANALYZE before idemd, back from
        # the statement, has logged it
        said = "analyzed 1 table whose statistics autovacuum had left behind"
        while said not in self.server.stderr_text() and time.monotonic() < deadline + 5:
            time.sleep(0.1)
        self.assertIn(said, self.server.stderr_text())
        # once up to date, nothing more to do: no second ANALYZE
        last = psql("SELECT last_analyze FROM pg_stat_user_tables WHERE relname = 'records'",
                    db=db).strip()
        time.sleep(16)
        self.assertEqual(last, psql("SELECT last_analyze FROM pg_stat_user_tables "
                                    "WHERE relname = 'records'", db=db).strip())


if __name__ == "__main__":
    harness.main()
