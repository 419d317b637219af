"""The architecture as checks: the layering is import-linter's contract and the size of functions ruff's rules
(pyproject.toml; .ci/run runs both on the code), and both catch what they are for; the search loads no ONNX or
NumPy; every package says what lives there; docs/architecture.md names every module and the layers as they are;
an exception to a size rule says why on its line."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "fp16bisect"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
RUFF = Path(sys.executable).with_name("ruff")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml"), "--no-cache"], cwd=root,
                          env={"PYTHONPATH": str(root), "PATH": ""}, capture_output=True, text=True)


@pytest.mark.slow
def test_the_contracts_catch_a_wrong_way_import(tmp_path):
    """``lint-imports`` (.ci/run) can fail: a model module importing the pipeline breaks the layers, a search
    module importing NumPy breaks the purity contract."""
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


@pytest.mark.parametrize("package", sorted(str(p.parent.relative_to(PACKAGE)) for p in PACKAGE.rglob("__init__.py")
                                           if p.parent != PACKAGE))
def test_every_package_says_what_lives_there(package):
    init = PACKAGE / package / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text()))
    assert doc and len(doc.strip().splitlines()) <= 3 and "TODO" not in doc, init


ARCHITECTURE = ROOT / "docs" / "architecture.md"


def documented(text: str) -> dict[str, list[str]]:
    """The page's sections under "Why each folder exists" ("### `cli/`", "### Root ..." as "") -> the modules its
    lines name ("- `args.py`: what it does"; "- `emulate/rewrite.py`: ..." in a sub-folder), as paths in the package."""
    sections: dict[str, list[str]] = {}
    why = text[text.index("## Why each folder exists"):]
    for line in why.splitlines():
        if heading := re.fullmatch(r"### (?:`(\w+)/`|Root\b).*", line):
            package = heading.group(1) or ""
            sections[package] = []
        elif (entry := re.match(r"- `([\w/]+\.py)`", line)) and sections:
            sections[package].append(f"{package}/{entry.group(1)}".lstrip("/"))
    return sections


def test_the_architecture_page_names_every_module():
    """Every module (every .py under fp16bisect/ but __init__.py and __main__.py, which the page's prose names) has
    its line in docs/architecture.md, under its top folder's heading; no line names a module that is gone."""
    modules = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
               if p.name not in ("__init__.py", "__main__.py")}
    named = [m for found in documented(ARCHITECTURE.read_text()).values() for m in found]
    missing, gone = sorted(modules - set(named)), sorted(set(named) - modules)
    twice = sorted({m for m in named if named.count(m) > 1})
    assert not (missing or gone or twice), (
        f"docs/architecture.md, 'Why each folder exists': add a line \"- `module.py`: its one job\" under the "
        f"heading of its folder (\"### `cli/`\", a sub-folder's module as `plots/trace.py`) for {missing}; "
        f"remove the lines of {gone}; named twice: {twice}")


def test_the_architecture_page_follows_the_layers():
    """The page's folders come in the import-linter contract's layer order (pyproject.toml), and so does the line
    stating the layers."""
    tomllib = pytest.importorskip("tomllib")
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = [name.strip().removeprefix("fp16bisect.") for layer in contracts[0]["layers"] for name in layer.split("|")]
    packages = [name for name in layers if (PACKAGE / name).is_dir()]
    text = ARCHITECTURE.read_text()
    assert [p for p in documented(text) if p] == packages, list(documented(text))
    stated = re.search(r"^ +(cli > .*?\))$", text, re.M | re.S)
    assert stated and re.findall(r"\w+", stated.group(1)) == layers, stated and stated.group(1)


def test_the_type_marker_and_the_schema_ship():
    """py.typed (PEP 561: a user's type checker reads our annotations) and the override file's schema are package
    data, declared in pyproject.toml; installed from a wheel (as .ci/run installs it), they are among its files."""
    tomllib = pytest.importorskip("tomllib")
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "py.typed" in declared.get("fp16bisect", []) and (PACKAGE / "py.typed").is_file(), declared
    installed = {f.as_posix() for f in importlib.metadata.files("fp16bisect") or []}
    if "fp16bisect/__init__.py" in installed:  # not an editable install: the wheel's files
        assert {"fp16bisect/py.typed", "fp16bisect/artifacts/overrides.schema.json"} <= installed


def test_the_public_tensorrt_entry_still_imports():
    from fp16bisect.tensorrt import apply_overrides

    assert callable(apply_overrides)


SIZE_RULES = ("C901", "PLR0912", "PLR0913", "PLR0915")  # pyproject.toml [tool.ruff.lint]: complexity, size


def test_the_size_rules_catch_a_long_function(tmp_path):
    """``ruff check`` (.ci/run) with the project's settings flags a function of many decisions, branches,
    statements and parameters; and a ``# noqa`` naming the rule (with its reason) lets that one function pass."""
    decisions = "\n".join(f"    if a == {i}:\n        a += {i}" for i in range(14))
    body = f"def long(a, b, c, d, e, f, g, h, i):\n{decisions}\n" + "    b = a\n" * 40 + "    return b\n"
    (tmp_path / "long.py").write_text(body)
    (tmp_path / "excused.py").write_text(body.replace("):", "):  # noqa: " + ", ".join(SIZE_RULES) + "  a reason", 1))
    done = subprocess.run([str(RUFF), "check", "--config", str(ROOT / "pyproject.toml"), "--no-cache",
                           "--output-format", "concise", "long.py", "excused.py"], cwd=tmp_path,
                          capture_output=True, text=True)
    found = {line.split()[1] for line in done.stdout.splitlines() if line.startswith("long.py:")}
    assert found == set(SIZE_RULES), done.stdout + done.stderr
    assert "excused.py" not in done.stdout, done.stdout


NOQA = re.compile(r"#\s*noqa:\s*([A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*)(.*)")


def test_every_exception_to_a_size_rule_says_why_on_its_line():
    """A ``# noqa`` for a complexity or size rule carries its reason after the codes, on the same line (a public
    function whose parameters are its records, a fake module whose classes close over it): never bare."""
    bare = []
    for path in sorted(p for folder in ("fp16bisect", "tests", "scripts") for p in (ROOT / folder).rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            found = NOQA.search(line)
            if found and set(re.findall(r"[A-Z]+[0-9]+", found.group(1))) & set(SIZE_RULES):
                reason = found.group(2).strip(" -:()")
                if len(reason.split()) < 3:
                    bare.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not bare, "give each exception its reason after the codes (# noqa: PLR0913  why):\n" + "\n".join(bare)


def test_no_exception_to_a_size_rule_outlives_its_function():
    """An exception whose function now meets the rule (split since, or never over) is one to remove: ruff's
    RUF100 names it."""
    done = subprocess.run([str(RUFF), "check", "--no-cache", "--output-format", "concise", "--select",
                           ",".join(("RUF100", *SIZE_RULES)), "fp16bisect", "tests", "scripts"], cwd=ROOT,
                          capture_output=True, text=True)
    stale = [line for line in done.stdout.splitlines() if "RUF100" in line and re.search(
        r"unused: [^)]*(" + "|".join(SIZE_RULES) + ")", line)]
    assert not stale, "remove these noqa codes: the functions meet the rules now\n" + "\n".join(stale)
