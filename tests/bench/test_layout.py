"""The bench kit's layout, read from the source: no import cycles, and the product does not import it.

Every import counts for the cycle check, wherever it sits (module top, function body, `if
TYPE_CHECKING:`): a cycle hidden in a lazy or type-only import is still a cycle to read and to
move. The product (`src/agentos`) may not import the bench kit (`src/agentos_bench`) at module
level; `agentos.cli` wires the `bench` commands in lazily, and is the one place listed in
`LAZY_PRODUCT_IMPORTS`. (`lint-imports` holds the same rules and which public modules the bench
kit may use; tests/test_layout.py checks what a started server loads.)
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
BENCH = SRC / "agentos_bench"
PRODUCT = SRC / "agentos"
CLI = PRODUCT / "cli" / "__init__.py"
MICRO = "agentos_bench.micro"  # the in-process microbenchmarks (see the tool-package check)
LAZY_PRODUCT_IMPORTS = {"agentos/cli/__init__.py"}  # `agentos bench ...` registers the bench kit's commands


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def bench_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(BENCH.rglob("*.py"))}


def imported_names(tree: ast.AST, package: str) -> Iterator[str]:
    """Every module an import under `tree` may name: `from a import b` yields `a` and `a.b`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: `package` is the importing module's package
                anchor = package.rsplit(".", node.level - 1)[0]
                base = f"{anchor}.{base}" if base else anchor
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def bench_graph() -> dict[str, set[str]]:
    """Module -> the bench modules it imports (only real modules: `from m import name` counts as `m`)."""
    modules = bench_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set(imported_names(ast.parse(path.read_text()), _package(path)))
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def _package(path: Path) -> str:
    name = module_name(path)
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as a path that returns to its start, or None (iterative DFS, three colours)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in sorted(graph):
        if state.get(root):
            continue
        path, stack = [root], [iter(sorted(graph[root]))]
        state[root] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def _run_at_import(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes that run when the module is imported: everything but the bodies of functions."""
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield child
            yield from _run_at_import(child)


def _bench_imports(nodes: Iterable[ast.AST], package: str) -> list[str]:
    found = []
    for node in nodes:
        if isinstance(node, ast.Import | ast.ImportFrom):
            for target in imported_names(node, package):
                if target == "agentos_bench" or target.startswith("agentos_bench."):
                    found.append(f"line {node.lineno}: {target}")
    return found


def product_files() -> Iterator[Path]:
    return iter(sorted(PRODUCT.rglob("*.py")))


def test_the_bench_modules_are_found() -> None:
    graph = bench_graph()
    assert "agentos_bench.load.loadgen" in graph and "agentos_bench.runs.waiting" in graph
    assert "agentos_bench.runs.plan" in graph["agentos_bench.runs.waiting"]  # the edges are read, not just the nodes


def test_no_import_cycle_between_bench_modules() -> None:
    assert find_cycle(bench_graph()) is None


def test_no_import_cycle_between_the_tool_packages() -> None:
    """Collapsed to `load`, `runs`, ...: tools stack on `common` and `report`, never on each other both ways.

    `micro` is left out of this view (its modules still count in the module-level check): it
    holds the in-process halves of several tools (`auth` of auth-cost, `knowledge_*` of
    knowledge), each of which reads its tool's plan while the tool runs it, a pair rather than
    a stack; it sits apart only because it alone may import the server's internals.
    """
    packages: dict[str, set[str]] = {}
    for name, targets in bench_graph().items():
        if _tool(name) == MICRO:
            continue
        edges = packages.setdefault(_tool(name), set())
        edges |= {_tool(t) for t in targets} - {_tool(name), MICRO}
    assert find_cycle(packages) is None
    assert packages["agentos_bench.common"] <= {"agentos_bench.report"}  # the shared place needs no tool


def _tool(module: str) -> str:
    """`agentos_bench.runs.waiting` -> `agentos_bench.runs`; the top-level modules stay themselves."""
    parts = module.split(".")
    if len(parts) < 2 or not (BENCH / parts[1] / "__init__.py").exists():
        return module
    return ".".join(parts[:2])


def test_the_graph_reads_lazy_and_relative_imports_and_find_cycle_finds_cycles() -> None:
    source = "def f():\n    from agentos_bench.a import x\n    from ..report import stats\n"
    names = set(imported_names(ast.parse(source), "agentos_bench.runs"))
    assert {"agentos_bench.a", "agentos_bench.report", "agentos_bench.report.stats"} <= names
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"b"}}) is None


def test_the_product_does_not_import_the_bench_kit_at_module_level() -> None:
    offenders = {
        str(path.relative_to(SRC)): found
        for path in product_files()
        if path != CLI and (found := _bench_imports(_run_at_import(ast.parse(path.read_text())), _package(path)))
    }
    assert offenders == {}


def test_lazy_bench_imports_in_the_product_stay_where_they_are_known() -> None:
    lazy = {
        str(path.relative_to(SRC))
        for path in product_files()
        if _bench_imports(ast.walk(ast.parse(path.read_text())), _package(path))
    }
    assert lazy <= LAZY_PRODUCT_IMPORTS, f"new bench imports in the product: {sorted(lazy - LAZY_PRODUCT_IMPORTS)}"


def test_the_module_level_check_sees_guarded_and_class_imports_but_not_function_bodies() -> None:
    source = (
        "try:\n    pass\nexcept ImportError:\n    import agentos_bench.common.mock_process\n"
        "class C:\n    from agentos_bench.report import stats\n"
        "def f():\n    from agentos_bench.load import loadgen\n"
    )
    found = _bench_imports(_run_at_import(ast.parse(source)), "agentos")
    assert found == [
        "line 4: agentos_bench.common.mock_process",
        "line 6: agentos_bench.report",
        "line 6: agentos_bench.report.stats",
    ]
