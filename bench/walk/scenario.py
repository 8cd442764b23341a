"""The requests bench/walk/walk.sh traces: idemd (IDEMD_BIN, traced when it
serves) with one gateway route, a warm-up of each walk, then the measured
ones: a token claim (POST /v1/tokens/{token}/claim) and a gateway submit
(POST /pay with a new Idempotency-Key, forwarded and stored)."""
import os
import sys
import time
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "integration"))
from harness import IdemdCase, assert_status  # noqa: E402
from test_gateway import Upstream  # noqa: E402


class Walk(IdemdCase):
    @classmethod
    def setUpClass(cls):
        cls.up = cls.stop_after_class(Upstream())
        cls.extra_config = {"routes": [{
            "method": "POST", "path": "/pay", "tenant": "acme", "operation": "pay.walk",
            "key": "header:Idempotency-Key",
            "upstream": "http://127.0.0.1:%d/pay" % cls.up.port}]}
        super().setUpClass()
        cls.define_operation("pay.walk", lease_seconds=30)

    def test_walks(self):
        self.put_operation("walk.op", lease_seconds=30)
        for _ in range(2):  # a warm-up, then the one measured
            token = self.issue("walk.op")
            time.sleep(0.3)
            assert_status(self, self.claim(token), 201)
            time.sleep(0.3)
            key = uuid.uuid4().hex
            r = self.anon.post("/pay", {"m": key}, headers={"Idempotency-Key": key})
            self.assertEqual(r.status // 100, 2, r.describe())
            time.sleep(0.3)


if __name__ == "__main__":
    unittest.main()
