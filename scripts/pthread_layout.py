#!/usr/bin/env python3
"""scripts/pthread_layout.py — libloom-pthread's files call down, never round (issue 32, item 7).

    scripts/pthread_layout.py [--dot] [--library FILE] [OBJECT_DIR | OBJECT...]

OBJECT_DIR holds the object files of the CMake target loom_pthread_objects
(default build/CMakeFiles/loom_pthread_objects.dir/capi/pthread); or the
objects are named one by one (ctest passes $<TARGET_OBJECTS:...>, so that
an object left behind by a source since removed is not read). --library
names the library built from them (libloom-pthread.so): it must exist
(exit 2 otherwise), and ctest's command names it so that a build of the
quick suite's targets (scripts/test_targets.py) builds it. The graph
has one node per object file (capi/pthread/x.cpp, x.c) and an edge A -> B
when A's object refers to a symbol (nm: U, or weak-undefined w/v) that B's
object defines (T/D/B/R/V/W/u/i with a definition): A calls a function of
B, or reads one of its variables. Symbols defined outside those objects
(libloom, capi/*.cpp, libc) are not in the graph. A symbol that several
objects define (an inline function, a template) is counted against the
objects that define it strongly when there are any, else against all of
them.

Prints each circle (a strongly connected set of files, then its elementary
cycles, each edge with one symbol that makes it, demangled) and exits 1 if
there is any; prints the layers (each file with the files it calls) and
exits 0 if there is none. With --dot, prints the graph in Graphviz's dot
language instead (edges labelled with a symbol, those inside a circle red),
with the same exit status. Exit 2 when OBJECT_DIR has no objects or nm
fails. Standard library and binutils' nm and c++filt only.

docs/DESIGN.md, "The files, in layers", says which file may call which;
ctest's pthread_layout runs this against the build.
"""

import os
import subprocess
import sys

DEFAULT_DIR = "build/CMakeFiles/loom_pthread_objects.dir/capi/pthread"
DEFINED = set("TDBRVWuiG") | {"S"}  # S/G: small-data sections, on some targets
UNDEFINED = set("Uwv")
MAX_CYCLES = 200  # elementary cycles printed per circle, at most


def read_symbols(path):
    """(strongly defined, weakly defined, undefined) global symbols of one object."""
    out = subprocess.run(["nm", "-P", path], check=True, capture_output=True, text=True).stdout
    strong, weak, undefined = set(), set(), set()
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        name, kind = fields[0], fields[1]
        if kind in UNDEFINED:
            undefined.add(name)
        elif kind in ("W", "V"):
            weak.add(name)
        elif kind in DEFINED:
            strong.add(name)
    return strong, weak, undefined


def demangle(names):
    names = sorted(names)
    if not names:
        return {}
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names) + "\n", check=True, capture_output=True,
                             text=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}
    return dict(zip(names, out)) if len(out) == len(names) else {n: n for n in names}


def object_files(args):
    """The objects named, or those in the one directory named (or the default one)."""
    if len(args) == 1 and os.path.isdir(args[0]) or not args:
        directory = args[0] if args else DEFAULT_DIR
        return [os.path.join(directory, f) for f in sorted(os.listdir(directory)) if f.endswith(".o")]
    return sorted(args)


def build_graph(objects):
    files = {o: os.path.basename(o)[:-2] for o in objects}  # .../signal.cpp.o -> signal.cpp
    syms = {files[o]: read_symbols(o) for o in objects}
    strong_by, weak_by = {}, {}
    for f, (strong, weak, _) in syms.items():
        for s in strong:
            strong_by.setdefault(s, []).append(f)
        for s in weak:
            weak_by.setdefault(s, []).append(f)
    edges = {f: {} for f in syms}  # edges[a][b] = sorted symbols a uses from b
    for a, (_, _, undefined) in syms.items():
        for s in undefined:
            for b in strong_by.get(s) or weak_by.get(s) or []:
                if b != a:
                    edges[a].setdefault(b, []).append(s)
    for a in edges:
        for b in edges[a]:
            edges[a][b].sort()
    return edges


def strongly_connected(edges):
    """Tarjan's algorithm: the components, each sorted, in reverse topological order."""
    index, low, stack, on_stack, comps = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            comps.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return comps


def elementary_cycles(edges, comp):
    """Every elementary cycle inside comp, each starting at its least file (a plain search:
    libloom-pthread has a score of files)."""
    nodes = sorted(comp)
    cycles = []
    for i, start in enumerate(nodes):
        allowed = set(nodes[i:])
        path = [start]

        def walk(v):
            for w in sorted(edges[v]):
                if len(cycles) >= MAX_CYCLES:
                    return
                if w == start:
                    cycles.append(list(path))
                elif w in allowed and w not in path:
                    path.append(w)
                    walk(w)
                    path.pop()

        walk(start)
    return cycles


def layers(edges):
    """Each file's height: 0 calls no other file, else one more than the highest it calls."""
    height = {}

    def h(v):
        if v not in height:
            height[v] = 0
            height[v] = 1 + max((h(w) for w in edges[v]), default=-1)
        return height[v]

    for v in edges:
        h(v)
    return height


def main():
    args = sys.argv[1:]
    dot = "--dot" in args
    args = [a for a in args if a != "--dot"]
    library = None
    if "--library" in args:
        i = args.index("--library")
        if i + 1 == len(args):
            args.append("-")  # (a usage error below)
        library = args[i + 1]
        del args[i:i + 2]
    if any(a.startswith("-") for a in args):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    if library is not None and not os.path.isfile(library):
        print(f"pthread_layout: {library} is not built", file=sys.stderr)
        return 2
    where = args[0] if len(args) == 1 else "the objects named" if args else DEFAULT_DIR
    try:
        objects = object_files(args)
        if not objects:
            raise FileNotFoundError("no object files")
        edges = build_graph(objects)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"pthread_layout: no objects of loom_pthread_objects in {where} ({e})", file=sys.stderr)
        return 2
    circles = [c for c in strongly_connected(edges) if len(c) > 1]
    in_circle = {f: i for i, c in enumerate(circles) for f in c}
    names = demangle({s for a in edges for b in edges[a] for s in edges[a][b][:1]})

    def example(a, b):
        syms = edges[a][b]
        more = f" (+{len(syms) - 1})" if len(syms) > 1 else ""
        return names.get(syms[0], syms[0]) + more

    if dot:
        print("digraph pthread_layout {")
        print("  rankdir=BT; node [shape=box];")
        for a in sorted(edges):
            for b in sorted(edges[a]):
                red = in_circle.get(a) is not None and in_circle.get(a) == in_circle.get(b)
                label = example(a, b).replace("\\", "\\\\").replace('"', '\\"')
                print(f'  "{a}" -> "{b}" [label="{label}"{", color=red" if red else ""}];')
        print("}")
        return 1 if circles else 0

    if not circles:
        height = layers(edges)
        print(f"pthread_layout: no circles among the {len(edges)} files of {where}; the layers, bottom first:")
        for level in range(max(height.values(), default=-1) + 1):
            for f in sorted(v for v in edges if height[v] == level):
                calls = ", ".join(sorted(edges[f])) or "-"
                print(f"  {level}  {f:<16} calls {calls}")
        return 0
    print(f"pthread_layout: {len(circles)} circle(s) among the files of {where}")
    for n, comp in enumerate(circles, 1):
        print(f"\ncircle {n}: {', '.join(comp)}")
        cycles = elementary_cycles(edges, comp)
        for cyc in cycles:
            ring = cyc + [cyc[0]]
            print("  " + " -> ".join(ring))
            for a, b in zip(ring, ring[1:]):
                print(f"      {a} -> {b}: {example(a, b)}")
        if len(cycles) >= MAX_CYCLES:
            print(f"  (only the first {MAX_CYCLES} cycles)")
        print("  its edges:")
        for a in comp:
            for b in sorted(edges[a]):
                if b in comp:
                    print(f"    {a} -> {b}: {example(a, b)}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
