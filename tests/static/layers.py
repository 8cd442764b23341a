#!/usr/bin/env python3
"""The layering rule of src/, checked over the #include lines.

src/ has one folder per layer; LAYERS lists them from the bottom up, once.
A file may include headers of its own layer and of layers below it, never
above; src/main.c stands above them all. There is no cycle of includes at
any grain:

  file    x.c or x.h -> the headers it includes;
  module  x.c with x.h (and x_int.h, the header its module shares among its
          own files) as one node;
  folder  follows from the first rule: includes only run downward.

The compiler enforces the first rule too: CMakeLists.txt builds each
layer as a library that sees only its own headers and links only the
layer below it (its IDEMD_LAYERS must list the same order as LAYERS).
Prints each broken rule with the include that breaks it and exits 1;
prints a one-line summary and exits 0 when all hold. Only the standard
library; reads the tree, runs nothing.
"""

import os
import re
import sys

LAYERS = ["base", "store", "engine", "http", "front", "gateway", "api", "cli"]
TOP = "main.c"  # above every layer

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def files():
    """{path relative to src/: layer index}"""
    out = {}
    for dirpath, _, names in os.walk(ROOT):
        rel = os.path.relpath(dirpath, ROOT)
        for n in names:
            if not n.endswith((".c", ".h")):
                continue
            if rel == ".":
                if n != TOP:
                    sys.exit("layers.py: src/%s is in no layer (src/<layer>/ or src/%s)"
                             % (n, TOP))
                out[n] = len(LAYERS)
                continue
            layer = rel.split(os.sep)[0]
            if layer not in LAYERS:
                sys.exit("layers.py: src/%s is no layer; LAYERS: %s" % (rel, ", ".join(LAYERS)))
            out[os.path.join(rel, n)] = LAYERS.index(layer)
    return out


def module(path):
    base = os.path.basename(path).rsplit(".", 1)[0]
    return base[:-4] if base.endswith("_int") else base


def cycles(graph):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    layer = files()
    by_name = {}
    for p in layer:
        by_name.setdefault(os.path.basename(p), []).append(p)
    dup = [n for n, ps in by_name.items() if len(ps) > 1]
    if dup:
        sys.exit("layers.py: one name in two folders: %s" % ", ".join(sorted(dup)))
    problems = []
    with open(os.path.join(ROOT, "..", "CMakeLists.txt"), encoding="utf-8") as f:
        m = re.search(r"set\(IDEMD_LAYERS ([a-z ]+)\)", f.read())
    if m is None or m.group(1).split() != LAYERS:
        problems.append("CMakeLists.txt's IDEMD_LAYERS (%s) is not LAYERS (%s)"
                        % (m.group(1) if m else "missing", " ".join(LAYERS)))
    fgraph, mgraph = {}, {}
    edges = 0
    for p in sorted(layer):
        with open(os.path.join(ROOT, p), encoding="utf-8") as f:
            text = f.read()
        for inc in INCLUDE.findall(text):
            target = by_name.get(os.path.basename(inc))
            if target is None:
                problems.append("%s includes \"%s\", which is not in src/" % (p, inc))
                continue
            t = target[0]
            edges += 1
            if layer[t] > layer[p]:
                problems.append("upward: src/%s (%s) includes src/%s (%s)" % (
                    p, (LAYERS + ["main"])[layer[p]], t, LAYERS[layer[t]]))
            fgraph.setdefault(p, set()).add(t)
            if module(p) != module(t):
                mgraph.setdefault(module(p), set()).add(module(t))
    for grain, graph in (("file", fgraph), ("module", mgraph)):
        for c in cycles(graph):
            ties = ["%s -> %s" % (a, b) for a in c for b in sorted(graph.get(a, ()))
                    if b in c]
            problems.append("%s cycle: %s (%s)" % (grain, ", ".join(c), "; ".join(ties)))
    if problems:
        print("\n".join(problems))
        print("layers.py: %d broken rules (layers from the bottom: %s, then %s)"
              % (len(problems), ", ".join(LAYERS), TOP))
        return 1
    print("layers.py: %d files in %d layers, %d includes: all downward, no cycle of files "
          "or modules" % (len(layer), len(LAYERS) + 1, edges))
    return 0


if __name__ == "__main__":
    sys.exit(main())
