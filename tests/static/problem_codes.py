#!/usr/bin/env python3
"""Checks that the problem codes idemd sends and the ones api/openapi.yaml
documents are the same set, with the same statuses.

Every `request_fail(req, STATUS, "code", ...)` in src/, and every row of
the outcome table (`[OUTCOME_X] = { STATUS, "code", ...` in
src/http/answer.c), is a code in use (`request_unavailable` records
`unavailable` 503). The `Problem` schema's
`code` property documents them twice: its `enum`, and its description as
"`code` STATUS" pairs. A code sent but not documented, documented but never
sent, or sent with another status than documented fails the check.
Exits 0 when they agree, 1 otherwise (naming each difference)."""

import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def codes_in_source():
    used = {}
    call = re.compile(r'request_fail\(\s*\w+\s*,\s*(\d{3})\s*,\s*"([a-z_]+)"')
    # the outcome table (src/http/answer.c): [OUTCOME_X] = { STATUS, "code", ...
    row = re.compile(r'\[OUTCOME_\w+\]\s*=\s*\{\s*(\d{3}),\s*"([a-z_]+)"')
    for path in sorted(glob.glob(os.path.join(ROOT, "src", "**", "*.c"), recursive=True)):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for status, code in call.findall(text) + row.findall(text):
            used.setdefault(code, set()).add(int(status))
        if "request_unavailable(" in text:
            used.setdefault("unavailable", set()).add(503)
    return used


def codes_documented():
    with open(os.path.join(ROOT, "api", "openapi.yaml"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"\n    Problem:\n(.*?)\n    \S", text, re.S)
    if not m:
        sys.exit("problem_codes: no Problem schema in api/openapi.yaml")
    schema = m.group(1)
    m = re.search(r"\n        code:\n(.*)", schema, re.S)
    code = m.group(1) if m else ""
    enum = re.search(r"\n          enum:\n((?:            - \S+\n?)+)", code)
    listed = set(re.findall(r"- (\S+)", enum.group(1))) if enum else set()
    pairs = {}
    for c, status in re.findall(r"`([a-z_]+)` (\d{3})", code):
        pairs.setdefault(c, set()).add(int(status))
    return listed, pairs


def main():
    used = codes_in_source()
    listed, pairs = codes_documented()
    errors = []
    for c in sorted(set(used) - listed):
        errors.append("%s is sent (%s) but not in the Problem code enum"
                      % (c, ", ".join(map(str, sorted(used[c])))))
    for c in sorted(listed - set(used)):
        errors.append("%s is in the Problem code enum but never sent" % c)
    for c in sorted(set(used) & listed):
        if c not in pairs:
            errors.append("%s has no status in the Problem code description" % c)
        elif used[c] != pairs[c]:
            errors.append("%s is sent with %s but documented with %s"
                          % (c, sorted(used[c]), sorted(pairs[c])))
    for e in errors:
        print("problem_codes: " + e)
    print("problem codes: %d sent, %d documented, %d differences"
          % (len(used), len(listed), len(errors)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
