""".gitignore matches what fp16bisect writes: in a git repository, a search leaves nothing git would add but the
outputs the user named (-o, --report, --json), whatever it wrote beside them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, SAMPLES, run
from fp16bisect.run.paths import journal_path, plans_dir, timing_cache_path

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git(where: Path, *argv: str) -> str:
    return subprocess.run(["git", *argv], cwd=where, capture_output=True, text=True, check=True).stdout


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    """A git repository holding the project's .gitignore and a sample model, committed; the working directory."""
    where = tmp_path / "repo"
    (where / "models").mkdir(parents=True)
    shutil.copy(ROOT / ".gitignore", where)
    for name in ("two_branches.onnx", "two_branches.npz"):
        shutil.copy(SAMPLES / name, where / "models")
    git(where, "init", "-q")
    git(where, "add", ".")
    git(where, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "models")
    monkeypatch.chdir(where)
    return where


def untracked(where: Path) -> list[str]:
    return sorted(line[3:] for line in git(where, "status", "--porcelain", "--untracked-files=all").splitlines())


def test_a_search_leaves_only_what_the_user_named(repo, capsys):
    """The search journal, the prior's, the command backend's plan files (kept) and the check's default plans
    directory: all beside the outputs, none shown by git status."""
    model, x = "models/two_branches.onnx", "models/two_branches.npz"
    judge = f"{sys.executable} -c 'import sys' {{model}}"  # every plan passes: all-FP16 is the answer
    code, _, err = run(capsys, "search", model, "--inputs", x, "-o", "out/o.json", "--keep-journal", "-q",
                       "--backend", "command", "--check", judge, "--keep-plans", "--report", "search.html")
    assert code == 0, err
    written = {p.relative_to(repo).as_posix() for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts}
    assert {"out/o.json", "search.html"} < written
    assert any(".prior.journal-" in p for p in written) and any(p.startswith("out/o.plans/") for p in written)
    assert run(capsys, "search", model, "--inputs", x, "-q")[0] == 0  # the default -o: overrides.json, here
    assert run(capsys, "check", model, "--inputs", x, "--backend", "command", "--check", judge, "--keep-plans",
               "--json", "check.json", "-q")[0] == 0
    assert untracked(repo) == ["check.json", "out/o.json", "search.html"]


def test_every_name_beside_an_output_is_ignored(repo):
    """Each name run/paths.py gives (a journal keyed or not, the prior's, the timing cache, the plans directory),
    and the work directory of the FP16 weights a killed run leaves; and mkdocs' site/."""
    out = "results/model.json"
    names = [journal_path(out, "0123456789ab"), journal_path(out, "0123456789ab", prior=True), journal_path(out),
             timing_cache_path(out), f"{plans_dir(out)}/plan-0/model.onnx", "fp16bisect.plans/plan-0/model.onnx",
             "results/.fp16bisect-weights-x1y2/weights.bin", "site/index.html"]
    for name in names:
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text("x")
    (repo / out).write_text("{}")
    assert untracked(repo) == [out]
