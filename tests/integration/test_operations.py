"""Integration tests: the operations API (PUT create/replace, GET one, GET
list, validation, tenant isolation)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import IdemdCase, assert_problem, assert_status, uniq  # noqa: E402


def op_list(tc, resp):
    j = assert_status(tc, resp, 200)
    if isinstance(j, dict):
        tc.assertIn("operations", j, resp.describe())
        j = j["operations"]
    tc.assertIsInstance(j, list, resp.describe())
    return j


class Operations(IdemdCase):
    def test_put_creates_then_replaces(self):
        name = uniq("order.create")
        pol = {"token_ttl_seconds": 600, "retention_seconds": 7200, "lease_seconds": 15}
        r = self.client.put("/v1/operations/" + name, pol)
        j = assert_status(self, r, 201)
        self.assertEqual(j.get("name"), name, r.describe())
        for k, v in pol.items():
            self.assertEqual(j.get(k), v, r.describe())

        pol2 = {"token_ttl_seconds": 900, "retention_seconds": 3600, "lease_seconds": 5,
                "version_key": "orders:{subject}", "require_version": True}
        r = self.client.put("/v1/operations/" + name, pol2)
        j = assert_status(self, r, 200)
        for k, v in pol2.items():
            self.assertEqual(j.get(k), v, r.describe())

        r = self.client.get("/v1/operations/" + name)
        j = assert_status(self, r, 200)
        self.assertEqual(j.get("name"), name)
        for k, v in pol2.items():
            self.assertEqual(j.get(k), v, r.describe())

    def test_replace_can_drop_version_key(self):
        name = self.put_operation(version_key="orders:{subject}", require_version=True)
        r = self.client.put("/v1/operations/" + name, harness.DEFAULT_POLICY)
        j = assert_status(self, r, 200)
        self.assertIn(j.get("version_key"), (None,), r.describe())
        self.assertIn(j.get("require_version", False), (False,), r.describe())

    def test_get_list(self):
        names = sorted(uniq("list") for _ in range(3))
        for n in names:
            self.put_operation(n)
        got = [o.get("name") for o in op_list(self, self.client.get("/v1/operations"))]
        for n in names:
            self.assertIn(n, got)

    def test_get_unknown_404(self):
        assert_problem(self, self.client.get("/v1/operations/" + uniq("nope")), 404, "not_found")

    def test_fixed_version_key_allowed(self):
        self.put_operation(version_key="catalog", expect=201)

    def bad(self, name, body):
        r = self.client.put("/v1/operations/" + name, body)
        assert_problem(self, r, 400, "invalid_request")
        # Nothing was stored.
        assert_problem(self, self.client.get("/v1/operations/" + name), 404, "not_found")

    def test_bad_names(self):
        for name in ("bad%20name", "x" * 300, "caf%C3%A9", "a%00b"):
            with self.subTest(name=name[:20]):
                r = self.client.put("/v1/operations/" + name, harness.DEFAULT_POLICY)
                assert_problem(self, r, 400, "invalid_request")

    def test_missing_fields(self):
        for field in ("token_ttl_seconds", "retention_seconds", "lease_seconds"):
            with self.subTest(missing=field):
                body = dict(harness.DEFAULT_POLICY)
                del body[field]
                self.bad(uniq("missing"), body)

    def test_out_of_range_durations(self):
        cases = [("token_ttl_seconds", 0), ("token_ttl_seconds", -5),
                 ("token_ttl_seconds", 10 ** 12), ("retention_seconds", -1),
                 ("retention_seconds", 10 ** 12), ("lease_seconds", 0),
                 ("lease_seconds", -1), ("lease_seconds", 10 ** 12)]
        for field, value in cases:
            with self.subTest(field=field, value=value):
                body = dict(harness.DEFAULT_POLICY)
                body[field] = value
                self.bad(uniq("range"), body)

    def test_wrong_types(self):
        cases = [("token_ttl_seconds", "60"), ("lease_seconds", 1.5),
                 ("retention_seconds", None), ("version_key", 7),
                 ("require_version", "yes")]
        for field, value in cases:
            with self.subTest(field=field, value=value):
                body = dict(harness.DEFAULT_POLICY)
                body[field] = value
                self.bad(uniq("type"), body)

    def test_bad_version_keys(self):
        for vk in ("", "k" * 1000, "orders\n{subject}"):
            with self.subTest(version_key=vk[:12]):
                body = dict(harness.DEFAULT_POLICY, version_key=vk)
                self.bad(uniq("vk"), body)

    def test_unknown_field(self):
        body = dict(harness.DEFAULT_POLICY, colour="blue")
        self.bad(uniq("unknown"), body)

    def test_not_an_object(self):
        self.bad(uniq("array"), [harness.DEFAULT_POLICY])

    def test_tenant_isolation(self):
        name = uniq("secret.op")
        self.put_operation(name, expect=201)
        assert_problem(self, self.other.get("/v1/operations/" + name), 404, "not_found")
        got = [o.get("name") for o in op_list(self, self.other.get("/v1/operations"))]
        self.assertNotIn(name, got)
        # The other tenant may register the same name independently.
        r = self.other.put("/v1/operations/" + name, dict(harness.DEFAULT_POLICY, lease_seconds=7))
        assert_status(self, r, 201)
        j = assert_status(self, self.client.get("/v1/operations/" + name), 200)
        self.assertEqual(j["lease_seconds"], harness.DEFAULT_POLICY["lease_seconds"])
        # And cannot issue tokens for an operation only the first tenant has.
        only = uniq("only.acme")
        self.put_operation(only, expect=201)
        r = self.issue_resp(only, client=self.other)
        assert_problem(self, r, 422, "operation_unknown")


if __name__ == "__main__":
    harness.main()
