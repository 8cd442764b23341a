"""Counts a walk through idemd's code from a uftrace record of
bench/walk/scenario.py: for the last call of each entry function (the
token claim's handler, the gateway's submit) up to the return of the
http_send that answers it, on every thread of the process but the
housekeeping ones (OTHER_ROOTS):

  stays   runs of consecutive calls and returns in one source file, on
          one thread (each move to another file, down or back, starts a
          new stay; so does a thread taking the request over); "entered
          by a call" counts the stays a call starts, not a return: the
          moves into another file
  files   the source files the walk enters
  climbs  calls from a file of a lower layer into a higher one, in the
          order of ARCHITECTURE.md: base store engine http front gateway
          api cli (src/main.c above them); "by a call" when the caller's
          file names the function it calls, "by a callback" when it was
          handed a pointer to it (a dispatch, a done callback, an iterator)

base/ and functions inline in headers are passed through, as if inline:
they are the leaves every layer may call.

Usage: walk.py TRACE BINARY TREE ENTRY... (TRACE the directory of
`uftrace record`; BINARY the traced idemd, read with nm -l for each
function's file; TREE the source tree it was built from). WALK_SHOW=1
prints each stay as it starts."""
import collections
import re
import os
import subprocess
import sys

LAYERS = ["base", "store", "engine", "http", "front", "gateway", "api", "cli"]
# threads that are not the request's, named by the function at their root
OTHER_ROOTS = {"janitor_main", "http_reaper", "waiters_main", "rc_main", "log_flusher"}


def files_of(binary):
    """Function name -> source path under src/, from nm -l."""
    out = subprocess.run(["nm", "-l", "--defined-only", binary], capture_output=True,
                         text=True, check=True).stdout
    where = {}
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) != 2 or "/src/" not in parts[1]:
            continue
        name = parts[0].split()[-1]
        path = "src/" + parts[1].rsplit("/src/", 1)[1].rsplit(":", 1)[0]
        where.setdefault(name, path)
    return where


def named_in(root, path, name, seen={}):
    """Whether the source file PATH names NAME (a direct call can; a call
    through a pointer handed down need not)."""
    if path not in seen:
        with open(os.path.join(root, path)) as f:
            seen[path] = f.read()
    return re.search(r"\b%s\b" % re.escape(name), seen[path]) is not None


def layer(path):
    parts = path.split("/")
    return LAYERS.index(parts[1]) if len(parts) > 2 and parts[1] in LAYERS else len(LAYERS)


def leaf(path):
    """base/ (and inline functions of headers): what every layer may call,
    passed through as if inline."""
    return path.startswith("src/base/") or path.endswith(".h")


def walk(events, where, root, entry):
    starts = [i for i, e in enumerate(events) if e["ph"] == "B" and e["name"] == entry]
    if not starts:
        sys.exit("walk.py: no call of %s in the trace" % entry)
    begin = starts[-1]
    stacks = collections.defaultdict(list)
    for e in events[:begin]:  # each thread's stack as the walk starts
        st = stacks[e["pid"]]
        if e["ph"] == "B":
            st.append(e["name"])
        elif st:
            st.pop()
    stays, entered, files, climbs, last = 0, 0, set(), [], {}
    for e in events[begin:]:
        st = stacks[e["pid"]]
        origin = st[0] if st else e["name"]
        if e["ph"] == "B":
            caller = st[-1] if st else None
            st.append(e["name"])
            here = where.get(e["name"])
        else:
            if st:
                st.pop()
            here = where.get(st[-1]) if st else None
            caller = None
        if origin in OTHER_ROOTS or here is None or leaf(here):
            if e["ph"] == "E" and e["name"] == "http_send":
                break
            continue
        if e["ph"] == "B":
            files.add(here)
            while caller and leaf(where.get(caller, "src/base/")) and len(st) > 1:
                caller = st[st.index(caller) - 1] if st.index(caller) > 0 else None
            if caller and where.get(caller) and layer(where[caller]) < layer(here):
                how = "call" if named_in(root, where[caller], e["name"]) else "callback"
                climbs.append("%s: %s (%s) -> %s (%s)"
                              % (how, caller, where[caller], e["name"], here))
        if here != last.get(e["pid"]):
            stays += 1
            entered += e["ph"] == "B"
            last[e["pid"]] = here
            if os.environ.get("WALK_SHOW"):
                print("    %3d %-28s %s %s" % (stays, here, "->" if e["ph"] == "B" else "<-",
                                           e["name"] if e["ph"] == "B" else st[-1]))
        if e["ph"] == "E" and e["name"] == "http_send":
            break
    return stays, entered, files, climbs


EVENT = re.compile(r"^\s*([0-9.]+)\s+(\d+): \[(entry|exit )\] ([A-Za-z_0-9.]+)\(")


def events_of(trace):
    """The record's calls and returns in time order: dicts of ts, pid (the
    thread), ph (B or E) and name, from `uftrace dump` (its --chrome
    form loses the threads)."""
    out = subprocess.run(["uftrace", "dump", "-d", trace], capture_output=True, text=True,
                         check=True).stdout
    events = []
    for line in out.splitlines():
        m = EVENT.match(line)
        if m:
            events.append({"ts": float(m.group(1)), "pid": int(m.group(2)),
                           "ph": "B" if m.group(3) == "entry" else "E", "name": m.group(4)})
    events.sort(key=lambda e: e["ts"])
    return events


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    events = events_of(sys.argv[1])
    where, root = files_of(sys.argv[2]), sys.argv[3]
    for entry in sys.argv[4:]:
        stays, entered, files, climbs = walk(events, where, root, entry)
        calls = sum(c.startswith("call:") for c in climbs)
        print("%s: %d stays (%d entered by a call) in %d files, %d climbs (%d by a call, "
              "%d by a callback)" % (entry, stays, entered, len(files), len(climbs), calls,
                                      len(climbs) - calls))
        for c, n in collections.Counter(climbs).items():
            print("  climb %s%s" % (c, " (%d times)" % n if n > 1 else ""))
        print("  files: " + " ".join(sorted(files)))


if __name__ == "__main__":
    main()
