"""docs/clients/python.md's examples: each fenced block preceded by
<!-- file: PATH --> is byte for byte the file PATH, and the files run."""

import os
import re
import subprocess
import sys
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("IDEMD_SOURCE_DIR") or os.path.join(HERE, "..", "..", "..")
PAGE = os.path.join(ROOT, "docs", "clients", "python.md")
BLOCK = re.compile(r"<!-- file: (\S+) -->\n```[a-z]*\n(.*?)```\n", re.S)


def blocks():
    with open(PAGE, encoding="utf-8") as f:
        doc = f.read()
    found = BLOCK.findall(doc)
    assert found, "no <!-- file: --> blocks in docs/clients/python.md"
    assert doc.count("```python\n") == len(found), "a python block does not name its file"
    return found


def test_blocks_are_the_files():
    for path, text in blocks():
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            assert f.read() == text, "the block of %s differs from the file" % path


def test_examples_run():
    env = dict(os.environ, EXAMPLE_OPERATION="doc.%s" % uuid.uuid4().hex[:10])
    for path, _ in blocks():
        out = subprocess.run([sys.executable, os.path.join(ROOT, path)], env=env,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines()[:2] == ["201 True", "422 fingerprint_mismatch"], out.stdout
        assert "email:evt_1 processed ack" in out.stdout, out.stdout
