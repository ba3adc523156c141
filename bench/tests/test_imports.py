"""No import circle in the harness or the Python package: the import graph
of each (every ``import`` and ``from ... import`` in every file, function
bodies included, parsed with ``ast``; edges inside the package only) has
no strongly connected component of more than one module.

Also a script: ``python bench/tests/test_imports.py [PACKAGE_DIR ...]``
prints each graph's size and its cycles (exit status 1 if any)."""

import ast
import sys
from pathlib import Path


def graph(pkg_dir: Path) -> dict[str, set[str]]:
    pkg = pkg_dir.name
    mods = {}
    for f in sorted(pkg_dir.rglob("*.py")):
        parts = list(f.relative_to(pkg_dir.parent).with_suffix("").parts)
        is_init = parts[-1] == "__init__"
        mods[".".join(parts[:-1] if is_init else parts)] = (f, is_init)
    # Extension modules (a .pyi or a compiled file, no .py): leaves.
    leaves = set()
    for f in pkg_dir.rglob("*"):
        if f.suffix in (".pyi", ".so", ".pyd"):
            parts = list(f.relative_to(pkg_dir.parent).parts)
            parts[-1] = parts[-1].split(".")[0]
            name = ".".join(parts)
            if name not in mods:
                leaves.add(name)
    known = set(mods) | leaves

    def resolve(name: str) -> str | None:
        """The module an import of `name` loads last (the longest known prefix)."""
        p = name.split(".")
        while p and ".".join(p) not in known:
            p.pop()
        return ".".join(p) if p else None

    g = {m: set() for m in known}
    for m, (f, is_init) in mods.items():
        base = m.split(".") if is_init else m.split(".")[:-1]
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    b = base[: len(base) - (node.level - 1)]
                    mod = ".".join(b + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                # `from mod import x`: the submodule mod.x if there is one,
                # else an attribute of mod.
                targets = [
                    f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names
                ]
            for t in targets:
                if t.split(".")[0] != pkg:
                    continue
                r = resolve(t)
                if r and r != m:
                    g[m].add(r)
    return g


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g[v]:
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
    for v in g:
        if v not in index:
            visit(v)
    return out


ROOT = Path(__file__).resolve().parents[2]
PACKAGES = [ROOT / "bench" / "sagitta_bench", ROOT / "python" / "sagitta"]


def test_no_import_cycles():
    for d in PACKAGES:
        assert cycles(graph(d)) == [], d


def test_cycles_are_found():
    g = {"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}, "p.d": {"p.a"}}
    assert cycles(g) == [["p.a", "p.b", "p.c"]]


if __name__ == "__main__":
    bad = 0
    for d in sys.argv[1:] or PACKAGES:
        g = graph(Path(d).resolve())
        cs = cycles(g)
        edges = sum(len(v) for v in g.values())
        print(f"{Path(d).name}: {len(g)} modules, {edges} edges, {len(cs)} cycles")
        for c in cs:
            print("  cycle:", " ".join(c))
            for m in c:
                print(f"    {m} -> {', '.join(sorted(x for x in g[m] if x in c))}")
        bad += len(cs)
    sys.exit(1 if bad else 0)
