"""The house's layout, read from the source (docs/house.md draws it).

- Every package and top-level module of `agentos` sits in a layer of the import-linter contract
  in pyproject.toml: a new package that no contract names fails here, so it cannot slip past
  the layers unseen.
- The contracts hold (`lint-imports`, as CI runs it).
- No module imports itself in a circle, inside a package or across packages, whatever the import
  (module top, function body, `if TYPE_CHECKING:`): a loop in types is a loop in the design.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ROOT / "src" / "agentos"
UNLAYERED = {"__init__", "__main__"}  # the package's face and `python -m agentos`: they import down only


def contracts() -> list[dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return list(config["contracts"])


def layered_names() -> set[str]:
    (layers,) = [c for c in contracts() if c["type"] == "layers" and c.get("containers") == ["agentos"]]
    assert isinstance(layers["layers"], list)
    return {name.strip() for layer in layers["layers"] for name in str(layer).split("|")}


def product_parts() -> set[str]:
    packages = {p.parent.name for p in PRODUCT.glob("*/__init__.py")}
    modules = {p.stem for p in PRODUCT.glob("*.py")} - UNLAYERED
    return packages | modules


def test_every_package_and_module_sits_in_a_layer() -> None:
    missing = product_parts() - layered_names()
    assert not missing, f"not in any layer of [tool.importlinter] (pyproject.toml): {sorted(missing)}"
    gone = layered_names() - product_parts()
    assert not gone, f"layers name what does not exist: {sorted(gone)}"


def test_the_layer_contracts_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def import_cycles(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for root in sorted(modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root) & modules)))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child) & modules))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    cycles.append(sorted(group))
    return cycles


def test_no_module_imports_itself_in_a_circle() -> None:
    graph = grimp.build_graph("agentos", "agentos_bench", include_external_packages=False)
    assert import_cycles(graph, set(graph.modules)) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The check above can fail: a planted circle is found."""
    graph = grimp.ImportGraph()
    for name in ("p", "p.a", "p.b", "p.c"):
        graph.add_module(name)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.a")
    graph.add_import(importer="p.c", imported="p.a")
    assert import_cycles(graph, {"p.a", "p.b", "p.c"}) == [["p.a", "p.b"]]
