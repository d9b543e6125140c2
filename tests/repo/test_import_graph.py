"""scripts/import_graph.py, the layering check of `make test`: it finds cycles through every kind of import, hidden
imports by name, and uncommented or too many function-level imports; and the repo's own graph is clean."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType

from tests.conftest import ROOT


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "scripts" / "import_graph.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["import_graph"] = mod
    spec.loader.exec_module(mod)
    return mod


ig = _load()


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return root


def test_a_cycle_through_a_function_level_import_is_found(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "a.py": "from pkg.b import y\nx = 1\n",
            "b.py": "y = 2\ndef f():\n    from pkg.a import x  # lazy on purpose\n    return x\n",
        },
    )
    found = ig.check(ig.module_graph([root]), max_inner=20)
    assert found == ["import cycle of 2 modules: pkg.a -> pkg.b"]


def test_a_cycle_under_type_checking_and_relative_imports_is_found(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "sub/__init__.py": "",
            "sub/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..c import Z\n",
            "c.py": "from pkg.sub import a\nZ = 1\n",
        },
    )
    found = ig.check(ig.module_graph([root]), max_inner=20)
    assert found == ["import cycle of 2 modules: pkg.c -> pkg.sub.a"]


def test_uncommented_hidden_and_too_many_inner_imports_are_findings(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "low.py": "V = 1\n",
            "high.py": (
                "def f():\n    from pkg.low import V\n    return V\n"
                "def g():\n    from pkg import low  # optional extra\n    return low\n"
                "m = __import__('pkg.low')\n"
            ),
        },
    )
    graph = ig.module_graph([root])
    found = ig.check(graph, max_inner=1)
    assert len(graph.inner) == 2
    assert any(line.endswith("needs a comment saying why") and ":2:" in line for line in found)
    assert any("hides an edge" in line for line in found)
    assert "2 imports of the packages inside functions; at most 1" in found
    assert ig.check(graph, max_inner=2) == [line for line in found if "at most" not in line]


def test_a_layered_package_is_clean(tmp_path: Path) -> None:
    root = _package(tmp_path, {"low.py": "V = 1\n", "high.py": "from pkg.low import V\nW = V\n"})
    graph = ig.module_graph([root])
    assert ig.check(graph, max_inner=0) == []
    assert graph.edges["pkg.high"] == {"pkg.low"}


def test_the_repo_graph_is_clean() -> None:
    graph = ig.module_graph([ROOT / "placement", ROOT / "server"])
    assert ig.check(graph, max_inner=20) == []
