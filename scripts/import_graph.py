"""The module import graph of the repo's packages, checked in `make test`: no import cycle, every import counted
(top level, inside functions, under TYPE_CHECKING), and few, commented imports of the packages inside functions.

Usage: python scripts/import_graph.py [--max-inner N] [ROOT ...]   (default roots: placement server; N: 20)
Exit 0 when the graph is clean; 1 with one line per finding otherwise. The generated stubs (placement/v1) are left
out. An import of the packages inside a function is allowed only with a comment on its line saying why (an
optional extra such as ray, torch or psycopg, or the CLI's start-up time), and at most N of them in all.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx

__all__ = ["Graph", "check", "module_graph"]


@dataclass
class Graph:
    """Modules (dotted name -> file), import edges between them, and the function-level imports of the packages
    as (file, line, has a comment)."""

    modules: dict[str, Path]
    edges: dict[str, set[str]]
    inner: list[tuple[Path, int, bool]] = field(default_factory=list)
    hidden: list[tuple[Path, int]] = field(default_factory=list)


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(current: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = current.split(".") if is_package else current.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def module_graph(roots: list[Path]) -> Graph:
    """Parse every module under `roots` (packages) and return its import graph."""
    modules: dict[str, Path] = {}
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if "v1" in path.relative_to(root).parts[:-1]:
                continue
            modules[_module_name(root, path)] = path
    tops = {r.name for r in roots}

    def target(name: str) -> str | None:
        while name:
            if name in modules:
                return name
            name = name.rpartition(".")[0]
        return None

    graph = Graph(modules, {m: set() for m in modules})
    for mod, path in modules.items():
        text = path.read_text()
        lines = text.splitlines()
        tree = ast.parse(text, str(path))
        in_function: set[int] = set()
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                in_function.update(id(n) for n in ast.walk(fn) if isinstance(n, ast.Import | ast.ImportFrom))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(mod, path.name == "__init__.py", node)
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name | ast.Attribute)
                and (getattr(node.func, "id", None) or getattr(node.func, "attr", None))
                in ("__import__", "import_module")
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and str(node.args[0].value).split(".")[0] in tops
            ):
                graph.hidden.append((path, node.lineno))
            hits = {t for t in map(target, names) if t and t != mod}
            graph.edges[mod] |= hits
            if id(node) in in_function and any(n.split(".")[0] in tops for n in names):
                first: int = getattr(node, "lineno", 1)
                last = lines[(getattr(node, "end_lineno", None) or first) - 1]
                graph.inner.append((path, first, "#" in last))
    return graph


def check(graph: Graph, max_inner: int) -> list[str]:
    """Every finding, one line each: cycles, hidden imports, uncommented or too many function-level imports."""
    g = nx.DiGraph()
    g.add_nodes_from(graph.modules)
    g.add_edges_from((a, b) for a, bs in graph.edges.items() for b in bs)
    found = [
        f"import cycle of {len(c)} modules: {' -> '.join(sorted(c))}"
        for c in nx.strongly_connected_components(g)
        if len(c) > 1
    ]
    found += [
        f"{p}:{line}: an import by name (__import__/import_module) hides an edge" for p, line in graph.hidden
    ]
    found += [
        f"{p}:{line}: an import of the package inside a function needs a comment saying why"
        for p, line, commented in graph.inner
        if not commented
    ]
    if len(graph.inner) > max_inner:
        found.append(f"{len(graph.inner)} imports of the packages inside functions; at most {max_inner}")
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("roots", nargs="*", default=["placement", "server"])
    ap.add_argument("--max-inner", type=int, default=20)
    args = ap.parse_args(argv)
    graph = module_graph([Path(r) for r in args.roots])
    found = check(graph, args.max_inner)
    for line in found:
        print(line)
    n_edges = sum(map(len, graph.edges.values()))
    print(
        f"import graph: {len(graph.modules)} modules, {n_edges} edges, "
        f"{len(graph.inner)} function-level imports of the packages, {len(found)} findings"
    )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
