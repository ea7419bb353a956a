#!/usr/bin/env python3
"""deps_check.py BUILD_DIR [FOLDER] [--max-cycle N] [--layers A,B,...] [--objects DIR]

Which C files of a source folder call into which, read from the object files
CMake built (nm), and every circle of files that call each other. troupe-head
keeps its layers (server/core <- services <- rpc, docs/DESIGN.md) only as long
as every call points down and no circle runs through more than two files, so
the test command runs this with --layers and --max-cycle 2 (ctest:
unit.layers.server).

  BUILD_DIR      a CMake build tree, built
  FOLDER         the source folder, relative to the tree's top (default: server)
  --max-cycle N  exit 1 when a circle has more than N files (default: none)
  --layers A,B   folders from the bottom up (paths as printed, e.g.
                 server/core,server/services,server/rpc): exit 1 when a file
                 calls into a folder listed after its own; files in no listed
                 folder are not checked
  --objects DIR  read *.o below DIR instead, each named by its path there
                 (the self-test plants circles this way)

Prints each circle with the symbols that tie each pair of its files, so a
failure says which call to turn into an event or to move down. Exit status:
0 fine, 1 a circle too long or a call up, 2 no object files or nm missing.
"""
import os
import re
import subprocess
import sys


def source_dir(build):
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("CMAKE_HOME_DIRECTORY:"):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return None


def cmake_objects(build, folder):
    """Yields (source path, object path) for the objects CMake built from
    sources below FOLDER: BUILD/<dir>/CMakeFiles/<target>.dir/<src>.o. An
    object whose source is gone (a file moved or deleted since that build
    tree compiled it: CMake leaves the old object behind) is skipped, so an
    old build tree does not report circles of files that no longer exist."""
    root = os.path.join(build, folder)
    top = source_dir(build)
    for dirpath, _, files in os.walk(root):
        if "/CMakeFiles/" not in dirpath + "/":
            continue
        for f in files:
            if not f.endswith(".o"):
                continue
            path = os.path.join(dirpath, f)
            m = re.search(r"^(.*)/CMakeFiles/[^/]+\.dir/(.*)\.o$", path)
            if m is None:
                continue
            base = os.path.relpath(m.group(1), build)
            src = os.path.normpath(os.path.join(base, m.group(2)))
            generated = os.path.join(m.group(1), m.group(2))
            if top is not None and not os.path.exists(os.path.join(top, src)) and not os.path.exists(generated):
                continue
            yield src, path


def plain_objects(top):
    for dirpath, _, files in os.walk(top):
        for f in files:
            if f.endswith(".o"):
                path = os.path.join(dirpath, f)
                yield os.path.relpath(path, top)[:-2], path


def symbols(obj):
    out = subprocess.run(["nm", "-P", obj], capture_output=True, text=True, check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        if parts[1] == "U":
            undefined.add(parts[0])
        elif parts[1] in "TDBRCVW":
            defined.add(parts[0])
    return defined, undefined


def circles(nodes, edges):
    """Tarjan's strongly connected components of more than one file."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
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

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return sorted(out, key=lambda c: (-len(c), c))


def main(argv):
    args, max_cycle, objdir, layers = [], None, None, []
    i = 0
    while i < len(argv):
        if argv[i] == "--max-cycle" and i + 1 < len(argv):
            max_cycle = int(argv[i + 1])
            i += 2
        elif argv[i] == "--layers" and i + 1 < len(argv):
            layers = [x.rstrip("/") for x in argv[i + 1].split(",") if x]
            i += 2
        elif argv[i] == "--objects" and i + 1 < len(argv):
            objdir = argv[i + 1]
            i += 2
        elif argv[i] in ("-h", "--help"):
            print(__doc__.strip())
            return 0
        else:
            args.append(argv[i])
            i += 1
    if objdir is None and not args:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    folder = args[1] if len(args) > 1 else "server"
    files = dict(plain_objects(objdir) if objdir else cmake_objects(args[0], folder))
    if not files:
        where = objdir or os.path.join(args[0], folder)
        print(f"deps_check: no object files under {where}: build the tree first", file=sys.stderr)
        return 2
    try:
        tables = {src: symbols(obj) for src, obj in files.items()}
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"deps_check: cannot read the object files with nm (binutils): {e}", file=sys.stderr)
        return 2
    owner = {}
    for src in sorted(tables):
        for name in tables[src][0]:
            owner.setdefault(name, src)
    edges, why = {}, {}
    for src, (_, undefined) in tables.items():
        for name in undefined:
            dst = owner.get(name)
            if dst is not None and dst != src:
                edges.setdefault(src, set()).add(dst)
                why.setdefault((src, dst), set()).add(name)
    found = circles(tables.keys(), edges)
    longest = max((len(c) for c in found), default=0)
    calls = sum(len(v) for v in edges.values())
    print(f"{objdir or folder}: {len(files)} files, {calls} calls between files, "
          f"{len(found)} circle(s), longest {longest} files")
    for comp in found:
        print(f"\ncircle of {len(comp)}: {' '.join(comp)}")
        members = set(comp)
        for a in comp:
            for b in sorted(edges.get(a, ()) & members):
                names = sorted(why[(a, b)])
                more = f", +{len(names) - 4}" if len(names) > 4 else ""
                print(f"  {a} -> {b}: {', '.join(names[:4])}{more}")
    def layer_of(path):
        for k, folder in enumerate(layers):
            if path.startswith(folder + "/"):
                return k
        return None

    up = []
    for (a, b), names in sorted(why.items()):
        la, lb = layer_of(a), layer_of(b)
        if la is not None and lb is not None and lb > la:
            up.append((a, b, sorted(names)))
    for a, b, names in up:
        more = f", +{len(names) - 4}" if len(names) > 4 else ""
        print(f"\ncall up: {a} -> {b}: {', '.join(names[:4])}{more}")
    rc = 0
    if up:
        print(f"\ndeps_check: {len(up)} call(s) from a lower layer into a higher one ({' < '.join(layers)}): "
              f"publish an event (server/core/events.h) or pass a function in at start instead",
              file=sys.stderr)
        rc = 1
    if max_cycle is not None and longest > max_cycle:
        print(f"\ndeps_check: a circle of {longest} files, more than {max_cycle}: make the lower file "
              f"publish an event (server/core/events.h) or move the shared code down, so that every "
              f"call points one way", file=sys.stderr)
        rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
