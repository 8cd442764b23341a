#!/usr/bin/env python3
"""Adds a gateway route to the quick start's config and reloads idemd.

    python3 docs/add-route.py '{"method": "POST", "path": "/orders", ...}'

Puts the route into .idemd/idemd.json (replacing a route of the same
method and path), sends SIGHUP to the `idemd --config .idemd/idemd.json
serve` that the quick start runs, and waits until the route answers.
By hand: edit the file, then `kill -HUP $(cat .idemd/idemd.pid)`. A file idemd
refuses changes nothing: the quick start's terminal shows why.
"""

import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request

CONF = os.path.realpath(".idemd/idemd.json")

route = json.loads(sys.argv[1])
with open(CONF) as f:
    cfg = json.load(f)
routes = [r for r in cfg.get("routes", [])
          if (r.get("method"), r.get("path")) != (route["method"], route["path"])]
cfg["routes"] = routes + [route]
with open(CONF + ".new", "w") as f:
    json.dump(cfg, f, indent=2)
    f.write("\n")
os.replace(CONF + ".new", CONF)


def serving():
    """The pids of `idemd --config CONF serve`."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                argv = f.read().decode().split("\0")
            cwd = os.readlink("/proc/%s/cwd" % pid)
        except OSError:
            continue
        if os.path.basename(argv[0]) != "idemd" or "serve" not in argv or "--config" not in argv:
            continue
        conf = argv[argv.index("--config") + 1]
        if os.path.realpath(os.path.join(cwd, conf)) == CONF:
            yield int(pid)


def status():
    host, _, port = cfg.get("listen", "127.0.0.1:8080").rpartition(":")
    host = "127.0.0.1" if host in ("", "0.0.0.0", "*") else host.strip("[]")
    req = urllib.request.Request("http://%s:%s%s" % (host, port, route["path"]),
                                 method=route["method"], data=b"")
    try:
        return urllib.request.urlopen(req, timeout=5).status
    except urllib.error.HTTPError as e:
        return e.code


pids = list(serving())
if not pids:
    sys.exit("add-route: no `idemd --config %s serve` is running (start the quick start)" % CONF)
before = status()
for pid in pids:
    os.kill(pid, signal.SIGHUP)
for _ in range(50):     # a new route answers once the reload is done
    time.sleep(0.1 if before == 404 else 0.5)
    if before != 404 or status() != 404:
        break
print("route %s %s: reloaded" % (route["method"], route["path"]))
