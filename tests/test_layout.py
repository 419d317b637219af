"""Import boundaries that keep the architecture: the search sees no ONNX, TensorRT or backend; backends never
see the search or the CLI; nothing but the entry point imports the CLI; every package says what lives there."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "fp16bisect"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module a file imports, as absolute names (relative imports resolved; `from a import b` yields a and a.b)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            found.add(target)
            found |= {f"{target}.{alias.name}" for alias in node.names}
    return found


def modules(under: str) -> list[Path]:
    return sorted((PACKAGE / under).rglob("*.py")) if (PACKAGE / under).is_dir() else [PACKAGE / f"{under}.py"]


def offending(paths, banned) -> list[str]:
    return sorted(
        f"{module_name(p)} imports {m}" for p in paths for m in imports(p)
        if any(m == b or m.startswith(b + ".") for b in banned)
    )


SEARCH = ["search", "search_memo", "search_lookahead", "search_progress"]  # the algorithm and what is beside it


def test_the_search_imports_nothing_but_the_standard_library_and_its_own_modules():
    allowed = set(sys.stdlib_module_names) | {"__future__"}
    own = {f"fp16bisect.{m}" for m in SEARCH} | {"fp16bisect"}
    for name in SEARCH:
        found = imports(PACKAGE / f"{name}.py")
        bad = [m for m in found if m.split(".")[0] not in allowed and not any(m == o or m.startswith(o + ".")
                                                                               for o in own)]
        assert found and not bad, (name, bad)


def test_the_search_is_short():
    """One algorithm that reads like its references; progress, look-ahead and the record live beside it."""
    assert len((PACKAGE / "search.py").read_text().splitlines()) <= 400


def test_importing_the_search_loads_no_onnx_numpy_or_tensorrt():
    code = ("import sys, fp16bisect.search; bad = {'onnx', 'onnxruntime', 'numpy', 'tensorrt', 'tensorrt_rtx'} "
            "& set(sys.modules); assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_backends_never_import_the_search_the_pipeline_or_the_cli():
    banned = ["fp16bisect.search", "fp16bisect.pipeline", "fp16bisect.cli", "fp16bisect.report"]
    assert not offending(modules("backends"), banned)


def test_only_the_entry_point_imports_the_cli():
    others = [p for p in PACKAGE.rglob("*.py") if p.name != "cli.py"]
    assert not offending(others, ["fp16bisect.cli"])


def test_the_model_package_knows_nothing_of_backends_search_or_artifacts():
    banned = ["fp16bisect.backends", "fp16bisect.search", "fp16bisect.pipeline", "fp16bisect.artifacts",
              "fp16bisect.report", "fp16bisect.cli"]
    assert not offending(modules("model"), banned)


def test_the_boundary_check_catches_a_planted_import(tmp_path, monkeypatch):
    """The checks above must be able to fail: a backend that imports the search is caught."""
    fake_root = tmp_path / "root"
    bad = fake_root / "fp16bisect" / "backends" / "bad.py"
    bad.parent.mkdir(parents=True)
    bad.write_text("from ..search import search\nfrom ..model.graph import Graph\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", fake_root)
    assert offending([bad], ["fp16bisect.search"]) == ["fp16bisect.backends.bad imports fp16bisect.search",
                                                       "fp16bisect.backends.bad imports fp16bisect.search.search"]


def import_graph(paths) -> dict[str, set[str]]:
    """Module -> the modules among ``paths`` it imports: each imported name (``imports()``: relative, nested and
    function-level imports too) resolved to the longest module path that exists (``a.b.f`` -> ``a.b``)."""
    names = {module_name(p) for p in paths}
    graph = {}
    for path in paths:
        found = set()
        for imported in imports(path):
            parts = imported.split(".")
            found |= next(({".".join(parts[:end])} for end in range(len(parts), 0, -1)
                           if ".".join(parts[:end]) in names), set())
        graph[module_name(path)] = found
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), and every module importing itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = [[m] for m in sorted(graph) if m in graph[m]]

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(graph[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return cycles


def describe(graph: dict[str, set[str]], cycle: list[str]) -> str:
    """A cycle's modules with the imports that close it: "a -> b -> a" edges within the component."""
    members = set(cycle)
    return "; ".join(f"{m} imports {', '.join(sorted(graph[m] & members))}" for m in cycle)


def test_no_import_cycles_in_the_package():
    """No two modules of fp16bisect import each other, directly or round a loop, even from inside a function."""
    graph = import_graph(sorted(PACKAGE.rglob("*.py")))
    cycles = import_cycles(graph)
    assert not cycles, "import cycle(s):\n" + "\n".join(describe(graph, c) for c in cycles)


def test_the_cycle_check_catches_a_planted_cycle(tmp_path, monkeypatch):
    """The check above must be able to fail: a function-level import closing a loop, and a self-import, are caught."""
    fake_root = tmp_path / "root"
    package = fake_root / "fp16bisect" / "backends"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from .b import f\n")
    (package / "b.py").write_text("def f():\n    from .c import g\n")
    (package / "c.py").write_text("from . import a\nfrom ..errors import UsageError\n")
    (package / "d.py").write_text("from fp16bisect.backends.d import h\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", fake_root)
    graph = import_graph(sorted(package.rglob("*.py")))
    assert import_cycles(graph) == [["fp16bisect.backends.d"], ["fp16bisect.backends.a", "fp16bisect.backends.b",
                                                                 "fp16bisect.backends.c"]]


@pytest.mark.parametrize("package", sorted(p.parent.name for p in PACKAGE.rglob("__init__.py") if p.parent != PACKAGE))
def test_every_package_says_what_lives_there(package):
    init = next(p for p in PACKAGE.rglob("__init__.py") if p.parent.name == package)
    doc = ast.get_docstring(ast.parse(init.read_text()))
    assert doc and len(doc.strip().splitlines()) <= 3, init


def test_the_public_tensorrt_entry_still_imports():
    from fp16bisect.tensorrt import apply_overrides

    assert callable(apply_overrides)
