#!/usr/bin/env python3
"""Functions, not files, are capped: every C function in src/ stays within
LENGTH lines and a cyclomatic complexity of CCN, as lizard measures them.

The functions over the cap today are listed in functions.allow beside this
file (path relative to src/, a space, the function's name, and after a "#"
why it stays over the cap for now, which every entry must say); a listed
function may stay over the cap until it is cut down, and must then leave the
list. Fails on a function over the cap that is not listed and on a listed
one that is no longer over it (or no longer exists), so the list only
shrinks.

lizard's parser can lose its way (a preprocessor conditional with a brace
in each branch does it) and then drops the rest of a file without a word,
so every function it did not measure would pass. The definitions are
therefore counted a second way, by their layout, as every function in
src/ is written: a definition's opening brace alone on a line at column
0 below its head, which starts at column 0 and may run on over indented
lines, its name the first one followed by "(" (or a line at column 0
that ends in ") {"); a file in which
lizard sees fewer definitions of a name than the layout shows fails, as
does an opening brace at column 0 that opens no definition this can name.

lizard is installed, pinned, in build/lizard-venv on first use (as
tests/contract.sh installs its validators); LIZARD names another one.
Prints each problem and exits 1; prints a one-line summary and exits 0.
"""

import collections
import csv
import io
import os
import re
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
    """({(path relative to src/, name): (length, ccn)} for every function,
    {path relative to src/: Counter of the names lizard saw defined})."""
    out = subprocess.run([lizard(), "-l", "c", "--csv", SRC], capture_output=True,
                         text=True, check=True).stdout
    found = {}
    seen = collections.defaultdict(collections.Counter)
    for row in csv.reader(io.StringIO(out)):
        if len(row) < 8 or not row[0].isdigit():
            continue
        ccn, length, path, name = int(row[1]), int(row[4]), row[6], row[7]
        key = (os.path.relpath(path, SRC), name)
        old = found.get(key, (0, 0))
        found[key] = (max(old[0], length), max(old[1], ccn))
        seen[key[0]][name] += 1
    return found, seen


NAME = re.compile(r"([A-Za-z_]\w*)\s*\(")
HEAD_START = re.compile(r"[A-Za-z_]")  # a definition's first line starts at column 0
TYPE = re.compile(r"(typedef\s+)?(struct|union|enum)\b[^(]*$")
CONTINUED = re.compile(r"\s+[^\s/*]")  # its parameters may run on, indented


def head_above(lines, i):
    """The definition's head in the lines above line I, or ""."""
    j = i - 1
    while j >= 0 and not lines[j].rstrip().endswith((";", "*/", "}")):
        if HEAD_START.match(lines[j]):
            return " ".join(lines[j:i])
        if not CONTINUED.match(lines[j]):
            break
        j -= 1
    return ""


def defined(path, problems):
    """A Counter of the function names the file at PATH defines, read from
    the layout alone; what it cannot name goes to PROBLEMS."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    names = collections.Counter()
    for i, line in enumerate(lines):
        if line.rstrip() == "{":
            head = head_above(lines, i)
        elif re.match(r"[A-Za-z_].*\)\s*\{\s*$", line):
            head = line
        else:
            continue
        m = NAME.search(head)
        if m and "=" in head[:m.start()] or not m and TYPE.match(head):
            continue  # an initializer's or a type's brace, not a body's
        if not m:
            problems.append("src/%s:%d: a brace at column 0 that opens no function named above it"
                            % (os.path.relpath(path, SRC), i + 1))
            continue
        names[m.group(1)] += 1
    return names


def unseen(seen):
    """A problem for each file in which lizard saw fewer definitions than
    its layout shows, and the number of definitions the layout shows."""
    problems = []
    total = 0
    for folder, _, files in os.walk(SRC):
        for name in sorted(files):
            if not name.endswith((".c", ".h")):
                continue
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, SRC)
            names = defined(path, problems)
            total += sum(names.values())
            lost = names - seen.get(rel, collections.Counter())
            if lost:
                problems.append("src/%s: lizard sees %d functions of the %d defined; it misses %s (a"
                                " preprocessor conditional with a brace in each branch blinds it)"
                                % (rel, sum(names.values()) - sum(lost.values()),
                                   sum(names.values()), ", ".join(sorted(lost))))
    return problems, total


def allowed(problems):
    """The (path, name) entries of functions.allow; an entry that does not
    say why it stays (after a "#" on its line) goes to PROBLEMS."""
    keys = set()
    with open(ALLOW, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            entry, _, why = line.partition("#")
            if not entry.strip():
                continue
            path, name = entry.split()
            keys.add((path, name))
            if not why.strip():
                problems.append("tests/static/functions.allow:%d: %s says not why it stays"
                                " over the cap (a \"# why\" after it)" % (number, name))
    return keys


def main():
    found, seen = measure()
    over = {k: v for k, v in found.items() if v[0] > LENGTH or v[1] > CCN}
    problems, total = unseen(seen)
    allow = allowed(problems)
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
    print("functions.py: %d functions (%d definitions, each seen by lizard), %d over %d lines"
          " or complexity %d, all of them listed" % (len(found), total, len(over), LENGTH, CCN))
    return 0


if __name__ == "__main__":
    sys.exit(main())
