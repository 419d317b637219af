"""The architecture as checks: the layering is import-linter's contract (pyproject.toml), run here; the search
loads no ONNX or NumPy; every package says what lives there; modules and functions stay small."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "fp16bisect"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml"), "--no-cache"], cwd=root,
                          env={"PYTHONPATH": str(root), "PATH": ""}, capture_output=True, text=True)


def test_the_import_contracts_are_kept():
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "BROKEN" not in done.stdout and "Contracts: 4 kept, 0 broken." in done.stdout, done.stdout


@pytest.mark.slow
def test_the_contracts_catch_a_wrong_way_import(tmp_path):
    """The check above can fail: a model module importing the pipeline breaks the layers, a search module
    importing NumPy breaks the purity contract."""
    shutil.copytree(PACKAGE, tmp_path / "fp16bisect", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "fp16bisect" / "model" / "planted.py").write_text("from fp16bisect.run import pipeline\n")
    (tmp_path / "fp16bisect" / "algorithm" / "planted.py").write_text("import numpy\n")
    done = lint_imports(tmp_path)
    assert done.returncode == 1, done.stdout
    assert "fp16bisect.model.planted -> fp16bisect.run.pipeline" in done.stdout, done.stdout
    assert "fp16bisect.algorithm.planted -> numpy" in done.stdout, done.stdout


def test_importing_the_search_loads_no_onnx_numpy_or_tensorrt():
    code = ("import sys, fp16bisect.algorithm.search; bad = {'onnx', 'onnxruntime', 'numpy', 'tensorrt', "
            "'tensorrt_rtx'} & set(sys.modules); assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_the_search_is_short():
    """One algorithm that reads like its references; progress, look-ahead and the record live beside it."""
    assert len((PACKAGE / "algorithm" / "search.py").read_text().splitlines()) <= 400


@pytest.mark.parametrize("package", sorted(str(p.parent.relative_to(PACKAGE)) for p in PACKAGE.rglob("__init__.py")
                                           if p.parent != PACKAGE))
def test_every_package_says_what_lives_there(package):
    init = PACKAGE / package / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text()))
    assert doc and len(doc.strip().splitlines()) <= 3 and "TODO" not in doc, init


def test_the_public_tensorrt_entry_still_imports():
    from fp16bisect.tensorrt import apply_overrides

    assert callable(apply_overrides)


MAX_MODULE_LINES, MAX_FUNCTION_LINES, MAX_PARAMETERS = 450, 80, 8
PUBLIC_API = {"fp16bisect/api/functions.py", "fp16bisect/api/tools.py"}  # the Python API may take more keyword arguments (one per CLI flag)


def functions(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            params = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs if p.arg not in ("self", "cls")]
            yield node, len(params), node.end_lineno - node.lineno + 1


def test_no_module_is_long():
    long = {str(p.relative_to(ROOT)): n for p in sorted(PACKAGE.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_no_function_is_long_or_takes_many_parameters():
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(ROOT))
        for node, params, lines in functions(path):
            if lines > MAX_FUNCTION_LINES or (params > MAX_PARAMETERS and where not in PUBLIC_API):
                bad.append(f"{where}:{node.lineno} {node.name}: {lines} lines, {params} parameters")
    assert not bad, "\n".join(bad)
