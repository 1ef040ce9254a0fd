#!/usr/bin/env python3
"""The import graph of toy-cli/src between top-level modules (and between the
files of commands/), from `use crate::…`, `crate::…` and `super::…` paths
outside comments and #[cfg(test)] modules; prints it, then the cycles (exit 1)
or "no cycles". Usage: python3 scripts/module-cycles.py [toy-cli/src]"""
import os, re, sys
root = sys.argv[1] if len(sys.argv) > 1 else "toy-cli/src"
def modpath(f):
    rel = os.path.relpath(f, root)[:-3].split(os.sep)
    if rel[-1] == "mod": rel = rel[:-1]
    return rel
def strip(src):
    # drop #[cfg(test)] mod tests { ... } blocks and comments
    src = re.sub(r"//[^\n]*", "", src)
    i = src.find("#[cfg(test)]")
    while i >= 0:
        j = src.find("{", i); depth = 0; k = j
        while k < len(src):
            if src[k] == "{": depth += 1
            elif src[k] == "}":
                depth -= 1
                if depth == 0: break
            k += 1
        src = src[:i] + src[k+1:]
        i = src.find("#[cfg(test)]")
    return src
def expand_use(src):
    # flatten `use crate::{a, b::{c}}` into paths
    out = []
    for m in re.finditer(r"\buse\s+([^;]+);", src):
        out += flatten(m.group(1).replace("\n", " ").replace(" ", ""))
    return out
def flatten(s):
    i = s.find("{")
    if i < 0: return [s]
    prefix = s[:i]; body = s[i+1:s.rfind("}")]
    parts, depth, cur = [], 0, ""
    for c in body:
        if c == "," and depth == 0: parts.append(cur); cur = ""; continue
        if c == "{": depth += 1
        if c == "}": depth -= 1
        cur += c
    if cur: parts.append(cur)
    return [p2 for p in parts for p2 in flatten(prefix + p)]
def resolve(path, me):
    segs = [x for x in path.split("::") if x]
    if not segs: return None
    if segs[0] == "crate": return segs[1:]
    if segs[0] in ("super", "self"):
        base = list(me)
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super": base = base[:-1]
            segs = segs[1:]
        return base + segs
    return None
def key(p):
    if not p: return None
    if p[0] == "commands" and len(p) > 1: return p[0] + "/" + p[1]
    return p[0]
edges = {}
files = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".rs")]
for f in files:
    me = modpath(f)
    if not me: continue
    src = strip(open(f).read())
    paths = expand_use(src) + re.findall(r"\b((?:crate|super)(?:::\w+)+)", src)
    a = key(me)
    edges.setdefault(a, set())
    for p in paths:
        r = resolve(p, me)
        b = key(r)
        if r is None or b is None or b == a: continue
        # items of a mod.rs re-exported: crate::commands::X where X is a fn, treat as 'commands'
        if b.startswith("commands/") and not os.path.exists(os.path.join(root, "commands", b.split("/")[1] + ".rs")) and not os.path.isdir(os.path.join(root, "commands", b.split("/")[1])):
            b = "commands"
        if not (os.path.exists(os.path.join(root, b.split("/")[0] + ".rs")) or os.path.isdir(os.path.join(root, b.split("/")[0]))): continue
        edges[a].add(b)
for a in sorted(edges):
    print(f"{a:20} -> {', '.join(sorted(edges[a])) or '-'}")
# cycles: strongly connected components (Tarjan)
idx, low, st, on, comps, n = {}, {}, [], set(), [], [0]
def sc(v):
    idx[v] = low[v] = n[0]; n[0] += 1; st.append(v); on.add(v)
    for w in edges.get(v, ()):
        if w not in idx: sc(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], idx[w])
    if low[v] == idx[v]:
        c = []
        while True:
            w = st.pop(); on.discard(w); c.append(w)
            if w == v: break
        if len(c) > 1: comps.append(sorted(c))
for v in sorted(edges):
    if v not in idx: sc(v)
print()
if comps:
    for c in comps: print("CYCLE among:", ", ".join(c))
    for c in comps:
        for a in c:
            for b in sorted(edges[a] & set(c)): print(f"  {a} -> {b}")
    sys.exit(1)
print("no cycles")
