#!/usr/bin/env python3
"""Functions, not files, are capped: every C function in src/ stays within
LENGTH lines and a cyclomatic complexity of CCN, as lizard measures them.

The functions over the cap today are listed in functions.allow beside this
file (path relative to src/, a space, the function's name); a listed
function may stay over the cap until it is cut down, and must then leave the
list. Fails on a function over the cap that is not listed and on a listed
one that is no longer over it (or no longer exists), so the list only
shrinks.

lizard is installed, pinned, in build/lizard-venv on first use (as
tests/contract.sh installs its validators); LIZARD names another one.
Prints each problem and exits 1; prints a one-line summary and exits 0.
"""

import csv
import io
import os
import subprocess
import sys

LENGTH = 60  # lines, from the opening line to the closing brace
CCN = 15
LIZARD_VERSION = "1.24.3"

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SRC = os.path.join(ROOT, "src")
ALLOW = os.path.join(HERE, "functions.allow")
VENV = os.path.join(ROOT, "build", "lizard-venv")


def lizard():
    """The lizard command, installed in build/lizard-venv when missing."""
    if os.environ.get("LIZARD"):
        return os.environ["LIZARD"]
    exe = os.path.join(VENV, "bin", "lizard")
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    except OSError:
        out = ""
    if out.strip() != LIZARD_VERSION:
        print("functions.py: installing lizard %s in build/lizard-venv" % LIZARD_VERSION)
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([os.path.join(VENV, "bin", "pip"), "install", "-q",
                        "--disable-pip-version-check", "lizard==" + LIZARD_VERSION], check=True)
    return exe


def measure():
    """{(path relative to src/, name): (length, ccn)} for every function."""
    out = subprocess.run([lizard(), "-l", "c", "--csv", SRC], capture_output=True,
                         text=True, check=True).stdout
    found = {}
    for row in csv.reader(io.StringIO(out)):
        if len(row) < 8 or not row[0].isdigit():
            continue
        ccn, length, path, name = int(row[1]), int(row[4]), row[6], row[7]
        key = (os.path.relpath(path, SRC), name)
        old = found.get(key, (0, 0))
        found[key] = (max(old[0], length), max(old[1], ccn))
    return found


def allowed():
    keys = set()
    with open(ALLOW, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                path, name = line.split()
                keys.add((path, name))
    return keys


def main():
    found = measure()
    allow = allowed()
    over = {k: v for k, v in found.items() if v[0] > LENGTH or v[1] > CCN}
    problems = []
    for (path, name), (length, ccn) in sorted(over.items()):
        if (path, name) not in allow:
            problems.append("src/%s: %s has %d lines, complexity %d (cap: %d lines, %d)"
                            % (path, name, length, ccn, LENGTH, CCN))
    for path, name in sorted(allow - set(over)):
        what = "is within the cap now" if (path, name) in found else "is gone"
        problems.append("src/%s: %s %s: take it out of tests/static/functions.allow"
                        % (path, name, what))
    if problems:
        print("\n".join(problems))
        print("functions.py: %d problems" % len(problems))
        return 1
    print("functions.py: %d functions, %d over %d lines or complexity %d, all of them listed"
          % (len(found), len(over), LENGTH, CCN))
    return 0


if __name__ == "__main__":
    sys.exit(main())
