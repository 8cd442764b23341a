#!/usr/bin/env python3
"""Checks the links of the repository's Markdown files.

Every relative link (inline, reference definition, image, HTML href/src)
must name a file or folder of the repository, and every #fragment a heading
of the target Markdown file (GitHub's heading ids) or an HTML id/name in it.
Fragments on other files may only be GitHub line anchors (#L10, #L10-L20).
Links with a scheme (https:, mailto:, ...) are not checked. Links inside code
blocks and code spans are not links.

The files checked are the Markdown files git tracks, or, outside a git
checkout, every *.md file below the root except build trees and
node_modules.

    python3 tests/static/links.py [ROOT]

Prints one line per broken link (file:line: ...) and a summary; exits 1 when
a link is broken.
"""

import os
import re
import subprocess
import sys
import unicodedata
from urllib.parse import unquote

SKIP_DIRS = re.compile(r"^(build|build-.*|node_modules|\.git|\.idemd)$")

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
CODE_SPAN = re.compile(r"(`+)((?:[^`\n]|\n(?![ \t]*\n)|`(?!\1))+?)\1(?!`)")
# [text](target "title"): the text may hold one level of brackets, the target
# balanced parentheses or <...>.
INLINE_LINK = re.compile(
    r"\[(?:[^\[\]\\]|\\.|\[[^\[\]]*\])*\]"
    r"\(\s*(<[^>\n]*>|(?:[^\s()\\]|\\.|\([^\s()]*\))*)"
    r"(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^()]*\)))?\s*\)")
REF_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:[ \t]*(<[^>\n]*>|\S+)", re.M)
HTML_LINK = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*[\"']([^\"']*)[\"']", re.I)
HTML_ID = re.compile(r"<[a-z][^>]*?\b(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.I)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
LINE_ANCHOR = re.compile(r"^L\d+(?:C\d+)?(?:-L\d+(?:C\d+)?)?$")


def markdown_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--", "*.md"],
                             check=True, capture_output=True).stdout
        files = [f for f in out.decode().split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, names in os.walk(root):
            dirs[:] = sorted(x for x in dirs if not SKIP_DIRS.match(x))
            files += [os.path.relpath(os.path.join(d, n), root)
                      for n in sorted(names) if n.endswith(".md")]
    return [f for f in files
            if not any(SKIP_DIRS.match(part) for part in f.split("/")[:-1])]


def blank_code(text):
    """The text with fenced code blocks and code spans turned into spaces
    (newlines kept, so offsets and line numbers stay), and the lines that
    are outside fenced code."""
    lines = text.split("\n")
    out, prose = [], []
    fence = None
    for i, line in enumerate(lines):
        m = FENCE.match(line)
        if fence is None and m and not (m.group(1)[0] == "`" and "`" in m.group(2)):
            fence = m.group(1)
            out.append("")
        elif fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                    and not m.group(2).strip():
                fence = None
            out.append("")
        else:
            out.append(line)
            prose.append(i)
    text = "\n".join(out)
    text = CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    return text, prose


def slug(heading):
    """GitHub's id for a heading's text (github-slugger)."""
    t = CODE_SPAN.sub(lambda m: m.group(2).strip(), heading)
    t = re.sub(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\([^)]*\)", r"\1", t)   # links
    t = re.sub(r"<[^>]+>", "", t)                                          # tags
    t = re.sub(r"(?<![\w])_+|_+(?![\w])", "", t)                           # _emphasis_
    t = t.strip().lower()
    t = "".join(c for c in t if c in " -_" or unicodedata.category(c)[0] in "LNM")
    return t.replace(" ", "-")


def anchors(text):
    """Every fragment a Markdown file answers to."""
    lines = text.split("\n")
    prose_text, prose = blank_code(text)
    prose_lines = prose_text.split("\n")
    ids, seen = set(), {}
    in_prose = set(prose)
    for i in prose:
        line = lines[i]
        m = ATX.match(line)
        heading = None
        if m:
            heading = m.group(2) or ""
        elif (i + 1 in in_prose and line.strip() and SETEXT.match(lines[i + 1])
              and not re.match(r"^ {0,3}([-*+]|\d+[.)]|>|\|)", line)
              and not SETEXT.match(line) and not ATX.match(line)):
            heading = line
        if heading is not None:
            base = slug(heading)
            n = seen.get(base, 0)
            seen[base] = n + 1
            ids.add(base if n == 0 else "%s-%d" % (base, n))
    for m in HTML_ID.finditer("\n".join(prose_lines)):
        ids.add(m.group(1))
    return ids


def links(text):
    """(line number, target) of every link in a Markdown file."""
    prose_text, _ = blank_code(text)
    found = []
    for rx in (INLINE_LINK, REF_DEF, HTML_LINK):
        for m in rx.finditer(prose_text):
            target = m.group(1)
            if target.startswith("<") and target.endswith(">"):
                target = target[1:-1]
            found.append((prose_text.count("\n", 0, m.start(1)) + 1, target))
    return sorted(found)


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), "..", ".."))
    files = markdown_files(root)
    cache = {}

    def anchors_of(path):
        if path not in cache:
            with open(path, encoding="utf-8") as f:
                cache[path] = anchors(f.read())
        return cache[path]

    broken = checked = 0
    for rel in files:
        path = os.path.join(root, rel)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for line, target in links(text):
            if not target or SCHEME.match(target) or target.startswith("//"):
                continue
            checked += 1
            base, _, fragment = target.partition("#")
            base = unquote(base.split("?", 1)[0])
            fragment = unquote(fragment)
            if not base:
                dest = path
            elif base.startswith("/"):
                dest = os.path.join(root, base.lstrip("/"))
            else:
                dest = os.path.normpath(os.path.join(os.path.dirname(path), base))
            problem = None
            if os.path.relpath(dest, root).startswith(".."):
                problem = "points outside the repository"
            elif not os.path.exists(dest):
                problem = "no such file or folder"
            elif fragment:
                if dest.endswith(".md") and os.path.isfile(dest):
                    if fragment not in anchors_of(dest):
                        problem = "no heading or id #%s in %s" % (
                            fragment, os.path.relpath(dest, root))
                elif not (os.path.isfile(dest) and LINE_ANCHOR.match(fragment)):
                    problem = "#%s is neither a line anchor nor in a Markdown file" % fragment
            if problem:
                broken += 1
                print("%s:%d: %s: %s" % (rel, line, target, problem))
    print("links: %d Markdown files, %d relative links, %d broken"
          % (len(files), checked, broken))
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
