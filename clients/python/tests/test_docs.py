"""docs/clients/python.md's examples: each fenced block preceded by
<!-- file: PATH --> is byte for byte the file PATH, and each file runs
(against a fresh operation guarding orders:{subject}, as the quick start's
order.create does) and prints what the page's <!-- output --> block after
it shows. The web examples need FastAPI and Django: tests/clients.sh
installs them."""

import os
import re
import subprocess
import sys
import uuid

import idemd
from conftest import API_KEY, POLICY, URL

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("IDEMD_SOURCE_DIR") or os.path.join(HERE, "..", "..", "..")
PAGE = os.path.join(ROOT, "docs", "clients", "python.md")
BLOCK = re.compile(r"<!-- file: (\S+) -->\n(?:<!-- not run: [^\n]* -->\n)?```[a-z]*\n(.*?)```\n"
                   r"(?:\s*It prints:\s*\n\s*<!-- (?:output|not run: [^\n]*) -->\n```text\n(.*?)```\n)?", re.S)


def blocks():
    with open(PAGE, encoding="utf-8") as f:
        doc = f.read()
    found = BLOCK.findall(doc)
    assert found, "no <!-- file: --> blocks in docs/clients/python.md"
    assert doc.count("```python\n") == len(found), "a python block does not name its file"
    return found


def test_blocks_are_the_files():
    for path, text, _ in blocks():
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            assert f.read() == text, "the block of %s differs from the file" % path


def test_examples_run_and_print_what_the_page_shows():
    op = "doc.%s" % uuid.uuid4().hex[:10]
    idemd.Client(URL, API_KEY).put_operation(op, version_key="orders:{subject}", **POLICY)
    for path, _, expected in blocks():
        # capture.py puts its own policy (no guard): its own operation
        env = dict(os.environ, EXAMPLE_OPERATION=op + (".capture" if "capture" in path else ""))
        if path.endswith(".py"):
            out = subprocess.run([sys.executable, os.path.join(ROOT, path)], env=env,
                                 capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
            assert expected, "%s: no <!-- output --> block after it" % path
            assert out.stdout.splitlines() == expected.splitlines(), out.stdout
