"""Fault test (a): a duplicate storm. 2,000 submits over 100 tokens from 64
concurrent clients spread over two idemd processes sharing one database:
every token is claimed exactly once and every duplicate gets the identical
stored response or 409 request_in_progress."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import IdemdCase, assert_status, free_port, psql  # noqa: E402
import faultkit  # noqa: E402


class DuplicateStorm(IdemdCase):
    extra_config = {"pool_size": 8, "threads": 8}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.server2 = cls.idemd.start(port=free_port())

    def test_duplicate_storm_two_instances(self):
        op = self.put_operation()
        faultkit.duplicate_storm(self, [self.server.port, self.server2.port], self.api_key, op,
                                 n_tokens=100, n_submits=2000, n_workers=64,
                                 label="storm (direct)")
        # the database agrees: 100 records, all completed at attempt 1
        rows = psql("SELECT state, attempt, count(*) FROM records GROUP BY 1, 2 ORDER BY 1, 2",
                    db=self.idemd.db).split()
        print("  storm (direct): records by state|attempt|count: %s" % rows)
        self.assertEqual(rows, ["completed|1|100"])
        # both instances are still healthy
        for s in (self.server, self.server2):
            assert_status(self, s.client().get("/readyz"), 200)


if __name__ == "__main__":
    harness.main()
