#!/usr/bin/env python3
"""Docs that run: the fenced examples of README.md and docs/**/*.md, run
against a real idemd and compared with what the page shows.

    IDEMD_BIN=build/idemd python3 tests/static/docs.py [FILE.md ...]

Needs the PostgreSQL of the integration tests (IDEMD_TEST_PGHOST,
IDEMD_TEST_PGUSER; tests/integration/harness.py). It starts one idemd on
127.0.0.1 (a free port), with a fresh database, set up as the quick start
leaves it: tenant "demo", operation "order.create" guarding
"orders:{subject}", and runs every page on it, back to back, as a reader
does: README.md, then the guides in the order of its "Where to go next",
then the other pages (or the pages given, in that order). The examples run
in a directory that stands for the checkout, holding .idemd/demo.key (the
tenant's key), .idemd/idemd.json (the config the server was started
with, `idemd --config .idemd/idemd.json serve` from that directory, as
the quick start starts it: an example may edit it and send SIGHUP),
.idemd/idemd.pid (its pid), node_modules/idemd (clients/node) and docs/
(this repository's), with `idemd` on the PATH and IDEMD_URL and
IDEMD_API_KEY exported (no IDEMD_CONFIG: the CLI finds the quick start's
config by itself). What one example does is there for the next, and for
the next page. A page must clean up after itself: a process it leaves
running (a demo upstream) or a file it leaves in the checkout fails the
page (and is then stopped or removed, so that the next page runs).
idemd and its database are removed at the end.

The convention, block by block (fences of three backticks; the info
string's first word is the language):

  sh, bash, shell   run with bash (errexit, pipefail: a command that fails
                    fails the example; stderr joins stdout).
                    Shell variables and functions carry over to the next
                    sh block of the same page. A run of comment lines of
                    the form "#    text" (hash, four spaces) right after
                    commands is their expected output; a bare "#" inside
                    such a run is an empty output line. Other comments
                    ("# text") are just comments.
  console           lines starting with "$ " are commands (a trailing "\\"
                    continues one); the lines up to the next command are
                    its expected output. No errexit: a failing command's
                    output is compared like any other.
  python            run with python3, the client of clients/python on
                    PYTHONPATH.
  js                run with node as an ES module, "idemd" resolving to
                    clients/node.
  json              a configuration, checked with `idemd check-config`:
                    a whole config object, members of one ('"key": ...'),
                    or one gateway route object (put into "routes"); a
                    database_url is added when it has none.
  sql               run with psql on the examples' database, inside a
                    transaction that is rolled back.
  anything else     must carry one of the markers below.

Markers are HTML comments on the lines just before a block's fence (blank
lines between are allowed), invisible on the rendered page:

  <!-- not run: REASON -->   the block is not run here, for REASON; the
                             runner lists it with its reason. python and
                             js blocks so marked are still compiled
                             (syntax only).
  <!-- output -->            a text block: the expected output of the
                             block just above it (python, js, sh).
  <!-- output of: COMMAND --> a text block: the expected output of the sh
                             COMMAND (run in the page's shell).
  <!-- file: PATH -->        the block shows the repository file PATH and
                             must equal it byte for byte (the client's own
                             tests run that file); python and js ones are
                             also run here.

Before the comparison both sides are normalized: "\\r" is dropped,
trailing blanks and blank lines are ignored, and values that differ from
run to run are replaced by placeholders: RFC 3339 times (<time>), HTTP
dates (<date>), traceparent values (<traceparent>), API keys (<api-key>),
32-hex ids, request ids and trace ids (<id>), and tokens (<token>). In an
expected line, "…" matches any text. The examples use the quick start's
address, 127.0.0.1:8080; the runner replaces it with its own server's in
the code, and back in the output. 127.0.0.1:9000, the address of the
pages' demo upstream, is replaced the same way by a free port of the run's.

IDEMD_DOCS_RAW=1 also prints what each block printed, unnormalized (to
write a page's expected output). Prints every block not run with its reason, a diff with file and line for
each mismatch, then "N examples run, N compared, N marked not run"; exits
1 on any mismatch or failure, 77 when there is no PostgreSQL to run on.
"""

import difflib
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import harness  # noqa: E402

QUICKSTART_ADDR = "127.0.0.1:8080"
UPSTREAM_ADDR = "127.0.0.1:9000"     # the pages' demo upstream (docs/demo-backend.py)
BLOCK_TIMEOUT = 60
RAW = os.environ.get("IDEMD_DOCS_RAW", "") not in ("", "0")   # print what each block printed
SH_LANGS = ("sh", "bash", "shell")
PY_LANGS = ("python", "py", "python3")
JS_LANGS = ("js", "javascript", "mjs")
OUTPUT_LANGS = ("", "text", "txt")

FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)")
MARKER_RE = re.compile(r"^\s*<!--\s*(not run|output of|output|file)\s*(?::\s*(.*?))?\s*-->\s*$")
EXPECT_RE = re.compile(r"^#(?: {4}(.*))?$")


# ---------------------------------------------------------------- the pages

class Block:
    def __init__(self, path, line, lang, text, markers):
        self.path = path            # relative to ROOT
        self.line = line            # of the opening fence, 1-based
        self.lang = lang
        self.text = text
        self.markers = markers      # {"not run": reason, "output": "", ...}

    def where(self):
        return "%s:%d" % (self.path, self.line)


def pages(args):
    """The pages in a reader's order: README.md, the guides and references
    in the order its "Where to go next" links them, then the others."""
    if args:
        return [os.path.relpath(os.path.abspath(a), ROOT) for a in args]
    found = ["README.md"]
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    nxt = text.partition("\n## Where to go next")[2]
    for link in re.findall(r"\]\((docs/[^)#]+\.md)", nxt):
        if link not in found and os.path.exists(os.path.join(ROOT, link)):
            found.append(link)
    found += sorted(p for p in (os.path.relpath(q, ROOT) for q in
                                glob.glob(os.path.join(ROOT, "docs", "**", "*.md"),
                                          recursive=True)) if p not in found)
    return found


def blocks_of(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        lines = f.read().split("\n")
    out = []
    i = 0
    while i < len(lines):
        m = FENCE_RE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang = m.group(1), m.group(2).lower()
        markers = {}
        j = i - 1
        while j >= 0 and (not lines[j].strip() or MARKER_RE.match(lines[j])):
            mm = MARKER_RE.match(lines[j])
            if mm:
                markers.setdefault(mm.group(1), mm.group(2) or "")
            j -= 1
        body = []
        k = i + 1
        while k < len(lines) and not (lines[k].lstrip(" ").startswith(fence[0] * len(fence))
                                      and not lines[k].strip().strip(fence[0])):
            body.append(lines[k])
            k += 1
        text = "\n".join(body) + ("\n" if body else "")
        out.append(Block(path, i + 1, lang, text, markers))
        i = k + 1
    return out


# ---------------------------------------------------------------- comparing

SUBST = [
    (re.compile(r"\b00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}\b"), "<traceparent>"),
    (re.compile(r"\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug"
                r"|Sep|Oct|Nov|Dec) \d{4} \d\d:\d\d:\d\d GMT\b"), "<date>"),
    (re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z"), "<time>"),
    (re.compile(r"\bidk_[A-Za-z0-9_-]+"), "<api-key>"),
    (re.compile(r"(?<![A-Za-z0-9_-])[0-9a-f]{32}(?![A-Za-z0-9_-])"), "<id>"),
    (re.compile(r"(?<![A-Za-z0-9_<>-])[A-Za-z0-9_-]{40,}(?![A-Za-z0-9_-])"), "<token>"),
]


def normalize(text, port=None, upstream_port=None):
    if port is not None:
        text = text.replace("127.0.0.1:%d" % port, QUICKSTART_ADDR)
    if upstream_port is not None:
        text = text.replace("127.0.0.1:%d" % upstream_port, UPSTREAM_ADDR)
    lines = [ln.rstrip() for ln in text.replace("\r", "").split("\n")]
    for i, ln in enumerate(lines):
        for rx, repl in SUBST:
            ln = rx.sub(repl, ln)
        lines[i] = ln
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return lines


def line_matches(expected, actual):
    if "…" not in expected:
        return expected == actual
    rx = ".*".join(re.escape(part) for part in expected.split("…"))
    return re.fullmatch(rx, actual) is not None


def compare(expected, actual, ports):
    """None when ACTUAL matches EXPECTED, else the diff lines."""
    e, a = normalize(expected), normalize(actual, *ports)
    if len(e) == len(a) and all(line_matches(x, y) for x, y in zip(e, a)):
        return None
    return list(difflib.unified_diff(e, a, "the page", "idemd", lineterm="", n=2))


# ---------------------------------------------------------------- running

class Run:
    def __init__(self):
        self.ran = self.compared = self.checked = 0
        self.not_run = []           # (block, reason)
        self.failures = []          # (where, message, diff lines)

    def fail(self, where, message, diff=None):
        self.failures.append((where, message, diff or []))
        print("FAIL %s: %s" % (where, message))
        for ln in diff or []:
            print("    " + ln)


class Docs:
    def __init__(self):
        self.idemd = harness.Idemd()
        self.work = os.path.join(self.idemd.tmp, "work")
        self.runner = os.path.join(self.idemd.tmp, "runner")   # the runner's own files
        os.makedirs(os.path.join(self.work, ".idemd"))
        os.makedirs(self.runner)
        # where the quick start keeps its config, and started from it as it is
        self.idemd.config_path = os.path.join(self.work, ".idemd", "idemd.json")
        self.idemd.write_config()
        self.idemd.migrate()
        self.api_key = self.idemd.tenant_create("demo")
        self.server = self.idemd.start()
        self.port = self.server.port
        with open(os.path.join(self.work, ".idemd", "idemd.pid"), "w") as f:
            f.write("%d\n" % self.server.proc.pid)
        client = harness.Client(self.port, self.api_key)
        r = client.put("/v1/operations/order.create",
                       {"token_ttl_seconds": 3600, "retention_seconds": 86400,
                        "lease_seconds": 30, "version_key": "orders:{subject}"})
        if r.status not in (200, 201):
            raise AssertionError("could not create order.create" + r.describe())
        self.upstream_port = harness.free_port()
        self.groups = set()     # process groups of the examples, for what they leave running
        os.symlink(os.path.join(ROOT, "docs"), os.path.join(self.work, "docs"))
        with open(os.path.join(self.work, ".idemd", "demo.key"), "w") as f:
            f.write(self.api_key + "\n")
        self.bin = os.path.join(self.idemd.tmp, "bin")
        os.makedirs(self.bin)
        wrapper = os.path.join(self.bin, "idemd")
        with open(wrapper, "w") as f:
            f.write('#!/bin/sh\nexec %s "$@"\n' % json.dumps(os.path.abspath(harness.BIN)))
        os.chmod(wrapper, 0o755)
        for d in (self.work, self.runner):   # the examples' .mjs files are in runner/
            nm = os.path.join(d, "node_modules")
            os.makedirs(nm)
            os.symlink(os.path.join(ROOT, "clients", "node"), os.path.join(nm, "idemd"))
        self.env = self.idemd.env({
            "PATH": self.bin + os.pathsep + os.environ.get("PATH", ""),
            "IDEMD_URL": "http://127.0.0.1:%d" % self.port,
            "IDEMD_API_KEY": self.api_key,
            "PYTHONPATH": os.path.join(ROOT, "clients", "python", "src"),
            "PYTHONDONTWRITEBYTECODE": "1",
            "LC_ALL": "C.UTF-8",
        })
        self.counter = 0
        self.state = self.scratch(".state")
        self.checkout = self.listing()

    def listing(self):
        """What the checkout holds: the work directory and docs/, by name."""
        names = set(os.listdir(self.work))
        names |= {"docs/" + n for n in os.listdir(os.path.join(ROOT, "docs"))}
        return names

    def end_page(self, run, path):
        """Fails PATH for what it left running or in the checkout, then
        stops and removes that, and starts the next page's shell afresh."""
        left = left_running(self.groups)
        for _ in range(20):     # what the page stopped takes a moment to go
            if not left:
                break
            time.sleep(0.1)
            left = left_running(self.groups)
        if left:
            cmds = []
            for pid in left:
                try:
                    with open("/proc/%d/cmdline" % pid, "rb") as f:
                        cmds.append(f.read().replace(b"\0", b" ").decode().strip())
                except OSError:
                    pass
                try:
                    os.kill(pid, signal.SIGTERM)
                except OSError:
                    pass
            run.fail(path, "left running after the page: " + "; ".join(cmds))
            time.sleep(0.5)
        self.groups = set()
        extra = sorted(self.listing() - self.checkout)
        if extra:
            run.fail(path, "left in the checkout: " + ", ".join(extra))
            for name in extra:
                p = os.path.join(self.work if not name.startswith("docs/") else ROOT, name)
                if os.path.isdir(p) and not os.path.islink(p):
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    os.unlink(p)
        try:
            os.unlink(self.state)
        except OSError:
            pass

    def close(self):
        for pid in left_running(self.groups):
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass
        self.server.stop()
        self.idemd.cleanup()

    def here(self, code):
        return code.replace(QUICKSTART_ADDR, "127.0.0.1:%d" % self.port) \
                   .replace("localhost:8080", "127.0.0.1:%d" % self.port) \
                   .replace(UPSTREAM_ADDR, "127.0.0.1:%d" % self.upstream_port)

    def scratch(self, suffix):
        self.counter += 1
        return os.path.join(self.runner, "example-%d%s" % (self.counter, suffix))

    def run_proc(self, argv, stdin=None):
        t0 = time.monotonic()
        try:
            # a session of its own: what the example leaves running stays in its group
            with subprocess.Popen(argv, stdin=subprocess.PIPE, cwd=self.work, env=self.env,
                                  text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  start_new_session=True) as p:
                self.groups.add(p.pid)
                try:
                    out, _ = p.communicate(stdin, timeout=BLOCK_TIMEOUT)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)   # and what holds its output open
                    out, _ = p.communicate()
                    raise subprocess.TimeoutExpired(argv, BLOCK_TIMEOUT, output=out)
            self.groups = {g for g in self.groups if left_running({g})}
            return p.returncode, out, time.monotonic() - t0
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            return None, out, time.monotonic() - t0

    def run_shell(self, segments, errexit=True):
        """Runs [(code, ...)] in one bash, in the page's shell state; returns
        (exit code, [output of each segment], full output)."""
        marks = ["@@docs-%d-%d@@" % (os.getpid(), i) for i in range(len(segments))]
        script = ["set -eo pipefail" if errexit else "set +e",
                  "__docs_vars=$(compgen -v | sort)",
                  '[ -f %s ] && . %s' % (shq(self.state), shq(self.state))]
        for (code, *_), mark in zip(segments, marks):
            script.append(self.here(code))
            script.append("printf '\\n%s\\n'" % mark)
        script.append("set +e")
        script.append('{ declare -f; for __docs_v in $(comm -13 <(printf "%%s\\n" "$__docs_vars") '
                      '<(compgen -v | sort)); do case $__docs_v in __docs_*) ;; '
                      '*) declare -p "$__docs_v" ;; esac; done; } > %s.new 2>/dev/null; '
                      'mv %s.new %s' % ((shq(self.state),) * 3))
        rc, out, _ = self.run_proc(["bash", "-c", "\n".join(script)])
        parts, rest = [], out
        for mark in marks:
            before, sep, after = rest.partition("\n%s\n" % mark)
            if not sep:
                parts.append(rest)
                rest = ""
                break
            parts.append(before)
            rest = after
        return rc, parts, out


def left_running(groups):
    """The processes still running in the process groups GROUPS."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) in groups and fields[0] != "Z":   # fields: state, ppid, pgrp
            pids.append(int(d))
    return pids


def shq(s):
    return "'" + s.replace("'", "'\\''") + "'"


def sh_segments(text):
    """[(code, expected or None, line of expected in the block)] of a sh block."""
    lines = text.rstrip("\n").split("\n")
    segs, code, i = [], [], 0
    while i < len(lines):
        j, run = i, []
        while j < len(lines) and EXPECT_RE.match(lines[j]):
            run.append(lines[j])
            j += 1
        while run and run[-1] == "#":
            run.pop()
        if run and any(ln != "#" for ln in run) and code and any(c.strip() for c in code):
            segs.append(("\n".join(code), "\n".join(EXPECT_RE.match(ln).group(1) or ""
                                                   for ln in run), i))
            code = []
            i += len(run)
            continue
        code.append(lines[i])
        i += 1
    if any(c.strip() and not c.lstrip().startswith("#") for c in code):
        segs.append(("\n".join(code), None, i))
    return segs


def console_segments(text):
    segs, cmd, out, at = [], None, [], 0
    lines = text.rstrip("\n").split("\n")
    i = 0
    while i < len(lines):
        ln = lines[i]
        if ln.startswith("$ "):
            if cmd is not None:
                segs.append((cmd, "\n".join(out), at))
            cmd, out = ln[2:], []
            while cmd.endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd += "\n" + lines[i]
            at = i + 1
        elif cmd is not None:
            out.append(ln)
        i += 1
    if cmd is not None:
        segs.append((cmd, "\n".join(out), at))
    return segs


# ---------------------------------------------------------------- one block each

def config_for(text, db_conninfo):
    s = text.strip()
    obj = json.loads(s if s.startswith("{") else "{" + s + "}")
    if "upstream" in obj and "path" in obj:
        obj = {"routes": [obj]}
    obj.setdefault("database_url", db_conninfo)
    return obj


def main(argv):
    if not harness.PGHOST or not harness.PGUSER:
        print("SKIP: IDEMD_TEST_PGHOST and IDEMD_TEST_PGUSER are not set "
              "(no PostgreSQL to run the examples against)", file=sys.stderr)
        return harness.SKIP_EXIT
    if not os.access(harness.BIN, os.X_OK):
        print("FAIL: idemd binary not found or not executable: %s" % harness.BIN,
              file=sys.stderr)
        return 1
    # a timeout's SIGTERM still stops idemd and drops the database
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    t0 = time.monotonic()
    run = Run()
    docs = Docs()
    try:
        for path, blocks in [(p, blocks_of(p)) for p in pages(argv)]:
            if not blocks:
                continue
            print("page %s" % path)
            run_page(docs, run, blocks)
            docs.end_page(run, path)
    finally:
        docs.close()

    print()
    if run.not_run:
        print("marked not run:")
        for b, reason in run.not_run:
            print("  %s (%s): %s" % (b.where(), b.lang or "text", reason))
    if run.failures:
        print("\n%d example(s) failed:" % len(run.failures))
        for where, message, _ in run.failures:
            print("  %s: %s" % (where, message.split("\n")[0]))
    print("\n%d examples run, %d compared, %d marked not run (%d more checked without "
          "running: configs, files shown, syntax) in %.1f s"
          % (run.ran, run.compared, len(run.not_run), run.checked, time.monotonic() - t0))
    return 1 if run.failures else 0


def run_page(docs, run, blocks):
    last = None          # (block, output) of the last block run, for <!-- output -->
    for b in blocks:
        mk = b.markers
        if "file" in mk:
            p = os.path.join(ROOT, mk["file"])
            try:
                with open(p, encoding="utf-8") as f:
                    content = f.read()
            except OSError as e:
                run.fail(b.where(), "file %s: %s" % (mk["file"], e))
                continue
            if content != b.text:
                run.fail(b.where(), "the block differs from %s" % mk["file"],
                         list(difflib.unified_diff(content.split("\n"), b.text.split("\n"),
                                                   mk["file"], "the page", lineterm="", n=1)))
                continue
            if b.lang not in PY_LANGS + JS_LANGS:
                run.checked += 1
                print("ok   %s: equal to %s" % (b.where(), mk["file"]))
                last = None
                continue
        if "not run" in mk:
            reason = mk["not run"] or "(no reason given)"
            if b.lang in PY_LANGS + JS_LANGS:
                err = syntax_error(docs, b)
                if err:
                    run.fail(b.where(), "does not compile: " + err)
                    continue
                reason += " [syntax checked]"
            run.not_run.append((b, reason))
            print("skip %s: %s" % (b.where(), reason))
            last = None
            continue
        if "output" in mk:
            if last is None:
                run.fail(b.where(), "an <!-- output --> block follows no block that ran")
                continue
            diff = compare(b.text, last[1], (docs.port, docs.upstream_port))
            run.compared += 1
            if diff:
                run.fail(b.where(), "output of %s differs" % last[0].where(), diff)
            else:
                print("ok   %s: output of %s" % (b.where(), last[0].where()))
            last = None
            continue
        if "output of" in mk:
            rc, parts, out = docs.run_shell([(mk["output of"],)])
            run.ran += 1
            run.compared += 1
            diff = compare(b.text, parts[0] if parts else out, (docs.port, docs.upstream_port))
            if rc != 0 or diff:
                run.fail(b.where(), "`%s` (exit %s) differs" % (mk["output of"], rc), diff)
            else:
                print("ok   %s: output of `%s`" % (b.where(), mk["output of"]))
            continue
        last = None
        if b.lang in SH_LANGS or b.lang == "console":
            console = b.lang == "console"
            segs = console_segments(b.text) if console else sh_segments(b.text)
            rc, parts, out = docs.run_shell(segs, errexit=not console)
            run.ran += 1
            bad = False
            for k, (code, expected, at) in enumerate(segs):
                if RAW:
                    print("raw  %s segment %d:\n%s" % (b.where(), k + 1,
                                                       indent(parts[k] if k < len(parts) else "")))
                if expected is None:
                    continue
                run.compared += 1
                got = parts[k] if k < len(parts) else ""
                diff = compare(expected, got, (docs.port, docs.upstream_port))
                if diff:
                    bad = True
                    first = code.strip().split("\n")[-1] if code.strip() else ""
                    run.fail("%s:%d" % (b.path, b.line + 1 + at),
                             "output of `…%s` differs" % first[-60:], diff)
            if rc != 0 and not console:
                run.fail(b.where(), "exited %s:\n%s" % (rc, indent(out[-3000:])))
            elif not bad:
                print("ok   %s: %d command group(s), %d compared"
                      % (b.where(), len(segs), sum(1 for s in segs if s[1] is not None)))
            last = (b, parts[-1] if parts else out)
        elif b.lang in PY_LANGS or b.lang in JS_LANGS:
            js = b.lang in JS_LANGS
            f = docs.scratch(".mjs" if js else ".py")
            with open(f, "w") as fh:
                fh.write(docs.here(b.text))
            rc, out, secs = docs.run_proc(["node", f] if js else ["python3", f])
            run.ran += 1
            if RAW:
                print("raw  %s:\n%s" % (b.where(), indent(out)))
            if rc != 0:
                run.fail(b.where(), "exited %s:\n%s" % (rc, indent(out[-3000:])))
            else:
                print("ok   %s: ran (%.1f s)" % (b.where(), secs))
            last = (b, out)
        elif b.lang == "json":
            try:
                cfg = config_for(b.text, harness.conninfo(docs.idemd.db))
            except ValueError as e:
                run.fail(b.where(), "not a JSON config or fragment of one: %s" % e)
                continue
            f = docs.scratch(".json")
            with open(f, "w") as fh:
                json.dump(cfg, fh)
            rc, out, _ = docs.run_proc(["idemd", "--config", f, "check-config"])
            run.checked += 1
            if rc != 0:
                run.fail(b.where(), "idemd check-config refuses it:\n" + indent(out))
            else:
                print("ok   %s: idemd check-config accepts it" % b.where())
        elif b.lang == "sql":
            sql = "BEGIN;\n%s\nROLLBACK;\n" % b.text
            rc, out, _ = docs.run_proc([harness.PSQL, "-X", "-q", "-v", "ON_ERROR_STOP=1",
                                        "-h", harness.PGHOST, "-U", harness.PGUSER,
                                        "-d", docs.idemd.db, "-f", "-"], stdin=sql)
            run.ran += 1
            if rc != 0:
                run.fail(b.where(), "psql failed:\n" + indent(out))
            else:
                print("ok   %s: psql ran it" % b.where())
        else:
            run.fail(b.where(), "a %s block with no marker: add <!-- not run: WHY --> "
                     "(or <!-- output --> after the block it shows the output of)"
                     % (b.lang or "plain"))


def syntax_error(docs, b):
    if b.lang in PY_LANGS:
        try:
            compile(b.text, b.where(), "exec")
            return None
        except SyntaxError as e:
            return str(e)
    f = docs.scratch(".mjs")
    with open(f, "w") as fh:
        fh.write(b.text)
    rc, out, _ = docs.run_proc(["node", "--check", f])
    return None if rc == 0 else out.strip()


def indent(s):
    return "\n".join("    " + ln for ln in s.rstrip().split("\n"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
