"""The documentation's examples, run as tests: README.md and every Markdown page under docs/.

A code block is tested when an HTML comment just before it (invisible on the page) says how, ``<!-- test: KIND
ARGUMENTS -->``; every block of README.md and docs/ is marked, and a page added there needs no change here. KIND:

- ``run`` [``; skip TEXT: WHY``...]: each command runs through ``bash`` in a fresh directory linking sample_models/
  and scripts/, PLACEHOLDERS replaced (an unknown one fails, naming it); a synopsis with ``[...]`` runs twice, with
  its required words and with every optional group (the first alternative, CHOICES for ``a|b``, less LEFT_OUT).
  It must exit as documented and give what ``check_outcome`` looks for. ``...`` goes on from the command before.
  Commands holding a TEXT are not run, nor is ``pip`` (``test_the_extras_named_exist``). ``flags WHY``: none runs.
- ``output`` [COMMAND]: COMMAND (or the first line, ``$ COMMAND``) beside overrides.json exits 0 printing the block.
- ``python`` [``tensorrt``]: the block runs; with ``tensorrt``, on the test double tests/fake_tensorrt.py, printing
  and raising what its comments quote. ``ci``: the commands are what .ci/run runs. ``file PATH``: the block is (in
  paragraphs) PATH. ``layout``: the modules and folders the tree names exist. ``none WHY``: shown, not run.

Every flag of every ``fp16bisect`` command of a ``run``, ``flags`` or ``output`` block is in its ``--help``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import fake_tensorrt
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import ROOT, SAMPLES, load_make_samples
from markdown_it import MarkdownIt

from fp16bisect.backends import tensorrt_usable
from fp16bisect.cli.main import main

README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").rglob("*.md"))]
MODEL = "transformer_block"  # the sample model the examples run on
CULPRITS = load_make_samples().KNOWN[MODEL]["culprits"]  # what a search of it keeps in FP32
MARKER = re.compile(r"<!--\s*test:\s*(\w+)\s*(.*?)\s*-->", re.S)

# A placeholder, or (its flag, the placeholder) -> what replaces it; y.npz (X plus noise), R.npz (FP32 references)
PLACEHOLDERS = {  # and O.json (the override file of a search) are written first
    "MODEL.onnx": f"sample_models/{MODEL}.onnx", "X.npz": f"sample_models/{MODEL}.npz", "Y.npz": "y.npz",
    "R.npz": "R.npz", "O.json": "O.json", "NODE": "ln1_mean",  # not in the set: --keep-fp32 adds it
    "CMD": "python scripts/judge_onnxruntime.py --provider cpu {model} {inputs} {outputs}",  # the CPU judge
    "MANIFEST.toml|.json": "sample_models/batch.toml", "MODEL.mixed.onnx": f"{MODEL}.mixed.onnx",
    "FILE.html": "report.html", ("--json", "FILE"): "result.json", ("--csv", "FILE"): "nodes.csv",
    ("--timing-cache", "FILE"): "timing.cache", ("--atol", "A"): "0.01", ("--rtol", "R"): "0.01",
    ("--min-cosine", "C"): "0.99", ("--max-mismatch", "F"): "0.0", ("--repeats", "N"): "2", ("--jobs", "N"): "2",
    ("--headroom", "H"): "4", ("--top", "N"): "5", ("--opt-level", "N"): "1", ("--opt-level", "0-5"): "1",
    ("--devices", "0,1,..."): "0,1", ("--minimum", "N"): "20"}
CHOICES = {"--backend": "command", "--typing": "strong", "--prior": "auto"}  # a|b|c after these flags, in full
LEFT_OUT = {"--ray", "ADDRESS"}  # out of full runs: a Ray instance (6 s; the batch transcript starts one), a cluster
HELP: dict[str, set] = {}  # subcommand -> the flags its --help names (check_flags asks each once)


@dataclass
class Example:
    path: Path
    line: int  # of the block, or of the command it runs
    kind: str  # "" when unmarked
    args: str
    text: str  # the block
    words: list | None = None  # run and flags: the command (``...`` resolved)

    @property
    def id(self) -> str:
        where = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path.name
        return "-".join([f"{where}:{self.line}", self.kind, *(self.words or [])[:2]])


def words(line: str) -> list[str]:
    """Shell words, quotes and ``# comments`` removed; ``[`` and ``]`` words of their own."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars="[]")
    lexer.whitespace_split = True
    return [part for token in lexer for part in (list(token) if set(token) <= set("[]") else [token])]


def command_lines(text: str) -> list[tuple[int, str]]:
    """(line offset, command): a line ending in a backslash, or followed by an indented one, goes on; comments none."""
    found: list[tuple[int, str]] = []
    for k, line in enumerate(text.splitlines()):
        if found and (found[-1][1].endswith("\\") or line[:1].isspace()):
            found[-1] = (found[-1][0], found[-1][1].rstrip("\\") + " " + line.strip())
        elif line.strip() and not line.lstrip().startswith("#"):
            found.append((k, line))
    return found


def commands(block: Example) -> list[Example]:
    found: list[Example] = []
    for offset, line in command_lines(block.text):
        part = words(line)
        if part[0] == "..." and found:  # the command before, up to the word this one goes on from
            before = found[-1].words
            part = before[:before.index(part[1])] + part[1:] if part[1] in before else before + part[1:]
        found.append(Example(block.path, block.line + offset, block.kind, block.args, block.text, part))
    return found


def examples(path: Path) -> list[Example]:
    """The page's code blocks, each with the marker before it; run and flags blocks as one example a command."""
    found, marker = [], None
    for token in MarkdownIt("commonmark").parse(path.read_text(encoding="utf-8")):
        if token.type in ("code_block", "fence"):
            kind, args = marker.groups() if marker else ("", "")
            block = Example(path, token.map[0] + 1 + (token.type == "fence"), kind, args, token.content.rstrip())
            found += commands(block) if kind in ("run", "flags") else [block]
        marker = MARKER.fullmatch(token.content.strip()) if token.type == "html_block" else None
    return found


def is_flag(word) -> bool:
    return isinstance(word, str) and word.startswith("-") and word not in ("-", "--")


def parse(it) -> list:
    """The alternatives (lists) up to the closing ``]``: words, and groups (tuples of alternatives)."""
    alternatives = [[]]
    for word in it:
        if word == "]":
            break
        if word == "|":
            alternatives.append([])
        else:
            alternatives[-1].append(tuple(parse(it)) if word == "[" else word)
    return alternatives


def expand(items: list, full: bool) -> list[str]:
    """A synopsis' words, without its optional groups or (``full``) with the first usable alternative of each. A
    group that is neither a flag's value nor starts with a flag is prose ("[... flags as for search]")."""
    out: list[str] = []
    for k, item in enumerate(items):
        if isinstance(item, str):
            out.append(item)
            continue
        usable = [alt for alt in item if alt and not (isinstance(alt[0], str) and alt[0] in LEFT_OUT)]
        if full and usable and (is_flag(usable[0][0]) or (k and is_flag(items[k - 1]))):
            out += expand(usable[0], full)
    return out


def substitute(synopsis: list[str]) -> list[str]:
    out: list[str] = []
    for word in (w for w in synopsis if w != "..."):  # "...": and so on
        flag, quoted = (out[-1] if out and is_flag(out[-1]) else None), " " in word  # a quoted command: its own words
        if (flag, word) in PLACEHOLDERS or word in PLACEHOLDERS:
            word = PLACEHOLDERS.get((flag, word), PLACEHOLDERS.get(word))
        elif "|" in word and not quoted:
            word = CHOICES[flag] if CHOICES.get(flag) in word.split("|") else word.split("|")[0]
        elif re.search(r"[A-Z]|\.\.\.", word) and not quoted and not is_flag(word):
            raise AssertionError(f"no substitution for {word!r}" + (f" after {flag}" if flag else "") +
                                 ": add it to PLACEHOLDERS in tests/test_readme.py")
        out.append(word)
    return out


def workdir(path: Path) -> Path:
    """scripts/ and, file by file, sample_models/ linked: what a command writes beside them (a batch) stays here."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "scripts").symlink_to(ROOT / "scripts", target_is_directory=True)
    (path / "sample_models").mkdir()
    for file in (ROOT / "sample_models").iterdir():
        (path / "sample_models" / file.name).symlink_to(file)
    return path


def shell(where: Path, command: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")}
    return subprocess.run(["bash", "-c", command], cwd=where, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def searched(tmp_path_factory) -> Path:
    """The override file a search of the sample transformer writes."""
    where = workdir(tmp_path_factory.mktemp("searched"))
    done = shell(where, f"fp16bisect search sample_models/{MODEL}.onnx --inputs sample_models/{MODEL}.npz -o o.json -q")
    assert done.returncode == 0, done.stderr
    return where / "o.json"


def prepare(where: Path, argv: list[str], searched: Path) -> list[str]:
    """The MADE files of PLACEHOLDERS; apply's override file; one ``--reference`` per ``--inputs`` (an FP32 run)."""
    x = np.load(SAMPLES / f"{MODEL}.npz")["x"]
    np.savez(where / "y.npz", x=(x + np.random.default_rng(0).normal(scale=0.1, size=x.shape)).astype(np.float32))
    shutil.copy(searched, where / "O.json")
    if argv[:2] == ["fp16bisect", "apply"] and not (where / argv[2]).exists():
        shutil.copy(searched, where / argv[2])
    if "--reference" not in argv:
        return argv
    session = ort.InferenceSession(str(SAMPLES / f"{MODEL}.onnx"), providers=["CPUExecutionProvider"])
    names, at = [o.name for o in session.get_outputs()], argv.index("--reference")
    argv, inputs = argv[:at] + argv[at + 2:], [argv[k + 1] for k, w in enumerate(argv) if w == "--inputs"]
    for i, path in enumerate(inputs):
        np.savez(where / f"R_{i}.npz", **dict(zip(names, session.run(None, dict(np.load(where / path))))))
    return argv + [word for i in range(len(inputs)) for word in ("--reference", f"R_{i}.npz")]


def value(argv: list[str], flag: str, default=None):
    return argv[argv.index(flag) + 1] if flag in argv else default


def check_outcome(argv: list[str], where: Path, out: str, err: str, code: int) -> None:
    """What each command gives beyond its exit code (the files' details are the other tests')."""
    sub, written = argv[1], (lambda flag, default=None: json.loads((where / value(argv, flag, default)).read_text()))
    assert "-q" not in argv or err == "", err  # progress goes to stderr, -q for none
    if sub == "search":
        assert "all FP16: max error" in out and all(f"  {c}  " in out for c in CULPRITS), out
        data = written("-o", "overrides.json")
        assert sorted(n["name"] for n in data["fp32_nodes"]) == sorted(CULPRITS) and data["search"]["minimal"]
        for flag in ("--atol", "--rtol", "--min-cosine", "--max-mismatch"):  # the tolerance in force is recorded
            given = value(argv, flag)  # the first one; OUTPUT:VALUE is recorded under per_output
            assert given is None or ":" in given or data["tolerance"][flag[2:].replace("-", "_")] == float(given)
        if value(argv, "--backend") == "command":
            assert data["backend"]["name"] == "command" and data["prior"]["agreed"], data["prior"]
        jobs = value(argv, "--jobs") or (str(len(value(argv, "--devices").split(","))) if "--devices" in argv else 0)
        assert not jobs or re.search(rf"\(\d+ round\(s\), up to {jobs} at once\)", out), out
    elif sub == "check":
        assert any(line.startswith("PASS" if code == 0 else "FAIL") for line in out.splitlines()), out
        assert "--json" not in argv or written("--json")["passed"] == (code == 0)
    elif sub == "scan":
        assert all(c in out for c in CULPRITS), out
    elif sub == "compare":
        first = re.search(r"first failing node: (\S+)", out)
        assert ("no node fails" in out) if "--overrides" in argv else (first and first.group(1) in CULPRITS), out
    elif sub == "apply":
        onnx.checker.check_model(onnx.load(where / value(argv, "-o")), full_check=True)
        pinned = re.search(r"pinned in FP32 \(([^)]*)\)", out)
        assert pinned and set(pinned.group(1).split(", ")) == set(CULPRITS) | {value(argv, "--keep-fp32")} - {None}
    elif sub == "batch":
        entries = len(re.findall(r"^\[\[entry\]\]", (where / argv[2]).read_text(), re.M))
        assert f"{entries} of {entries} entries passed" in out, out
        assert "--json" not in argv or written("--json")["schema"] == "fp16bisect.batch/1"


def check_flags(command: list[str]) -> None:
    if command[:1] != ["fp16bisect"] or len(command) < 2:
        return
    if command[1] not in HELP:
        with contextlib.redirect_stdout(io.StringIO()) as printed, contextlib.suppress(SystemExit):
            main([command[1], "--help"])
        HELP[command[1]] = set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", printed.getvalue()))
    unknown = sorted({w for w in command if is_flag(w) and " " not in w} - HELP[command[1]])
    assert not unknown, f"fp16bisect {command[1]} does not know {unknown}"


def run_command(example: Example, where: Path, searched: Path) -> None:
    check_flags(example.words)
    skips = dict(s.split(":", 1) for s in re.findall(r"skip ([^;]+)", example.args))
    why = next((why.strip() for text, why in skips.items() if text.strip() in " ".join(example.words)), None)
    if example.kind == "flags" or why or example.words[0] == "pip":
        pytest.skip(why or example.args or "installs packages: test_the_extras_named_exist checks the extras")
    forms = [substitute(expand(parse(iter(example.words))[0], full)) for full in (False, True)]  # minimal, full
    for k, argv in enumerate(forms[:1] if forms[0] == forms[1] else forms):
        argv = prepare(workdir(where / str(k)), argv, searched)
        done = shell(where / str(k), shlex.join(argv))
        context = f"{example.id}: {shlex.join(argv)}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
        # 0; check without --overrides 1 (the sample misses the tolerance in all-FP16); no tensorrt or GPU: 2, a fix
        no_gpu = value(argv, "--backend") == "tensorrt" and not tensorrt_usable()
        assert done.returncode == (2 if no_gpu else int(argv[1] == "check" and "--overrides" not in argv)), context
        assert not no_gpu or "--backend emulate" in done.stderr or "pip install" in done.stderr, context
        if not no_gpu:
            check_outcome(argv, where / str(k), done.stdout, done.stderr, done.returncode)


def comparable(lines) -> list[str]:
    """Lines as shown, spacing evened out and seconds aside: "in 0.3 s", the column headed ``seconds``."""
    rows = [" ".join(line.split()) for line in lines if line.strip()]
    at = next((k for k, row in enumerate(rows) if " seconds" in row), len(rows))  # a table's header
    return [re.sub(r"\bin [\d.]+ s\b", "in N s", re.sub(r" \d+\.\d+(?= |$)", " N", row) if k > at else row)
            for k, row in enumerate(rows)]


def run_output(example: Example, where: Path, searched: Path) -> None:
    lines = example.text.splitlines()
    command, shown = (example.args, lines) if example.args else (lines[0].removeprefix("$ "), lines[1:])
    check_flags(words(command))
    shutil.copy(searched, workdir(where) / "overrides.json")  # what apply and check --overrides read
    done = shell(where, command)
    assert done.returncode == 0, done.stderr
    assert comparable(done.stdout.splitlines()) == comparable(shown), f"printed:\n{done.stdout}\nnot:\n{example.text}"


def run_python(example: Example, where: Path, searched: Path) -> None:
    """With ``tensorrt``, "your network, as usual": the sample's, parsed by the double's parser; its builder, ..."""
    shutil.copy(searched, workdir(where) / "overrides.json")
    if example.args != "tensorrt":
        done = subprocess.run([sys.executable, "-c", example.text], cwd=where, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return
    trt = fake_tensorrt.make()  # TensorRT 10 with weak typing; no GPU needed

    def said(code: str) -> re.Pattern:  # the comment's quoted text on the line of ``code`` (any number for one)
        quoted = re.search(r'#\s*"([^"]+)"', next((ln for ln in example.text.splitlines() if code in ln), ""))
        assert quoted, f"{example.id}: no comment on {code!r} says what it gives"
        return re.compile(re.sub(r"\d+", r"\\d+", re.escape(quoted.group(1)).replace(r"\.\.\.", ".*")))

    def given() -> dict:
        network = (builder := trt.Builder(None)).create_network(0)
        return {"builder": builder, "network": network, "parser": trt.OnnxParser(network, None),
                "config": builder.create_builder_config(), "runtime": trt.Runtime(None),
                "onnx_bytes": (SAMPLES / f"{MODEL}.onnx").read_bytes()}

    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(io.StringIO()) as printed:
        patch.setitem(sys.modules, "tensorrt", trt)
        patch.chdir(where)
        exec(compile(example.text, example.id, "exec"), ran := given())
        assert said("print(applied)").fullmatch(printed.getvalue().strip()), printed.getvalue()
        assert {p.node for p in ran["applied"].layers} == set(CULPRITS) and ran["applied"].missing == []
        assert ran["check"].ok
        trt._myelin = [[CULPRITS[0], CULPRITS[-1], "ln1_add_eps"]]  # TensorRT fuses a pin with FP16 neighbours
        with pytest.raises(SystemExit) as stopped:
            exec(compile(example.text, example.id, "exec"), given())
    assert said("raise SystemExit").fullmatch(str(stopped.value)), stopped.value


def check_file(example: Example, *_) -> None:
    def paragraphs(text: str) -> list[str]:  # comment lines left out
        kept = "\n".join(line for line in text.strip().split("\n") if not line.lstrip().startswith("#"))
        return [p.strip() for p in re.split(r"\n\s*\n", kept) if p.strip()]

    whole, at = paragraphs((ROOT / example.args).read_text()), 0
    for paragraph in paragraphs(example.text):
        assert paragraph in whole[at:], f"{example.id}: not in {example.args} (in this order):\n{paragraph}"
        at = whole.index(paragraph, at) + 1


def check_layout(example: Example, *_) -> None:
    package = ROOT / "fp16bisect"
    text = re.sub(r"`[^`]*\s[^`]*`", " ", example.text)  # code quoted in a description
    names = set(re.findall(r"(?<![\w/.])((?:\w+/)*\w+\.py|\w+/)(?![\w/])", text)) - {"fp16bisect/"}
    have = {p.relative_to(package).as_posix() + ("/" if p.is_dir() else "") for p in package.rglob("*")}
    missing = [n for n in sorted(names) if not any(h == n or h.endswith("/" + n) for h in have)]
    assert len(names) >= 10 and not missing, f"{example.id}: no {missing} in fp16bisect/ (read {sorted(names)})"


def check_ci(example: Example, *_) -> None:
    ci = (ROOT / ".ci" / "run").read_text().replace("pip install -q ", "pip install ")
    ci = re.sub(r'"\$work/([^"]+)"', r"\1", ci)
    for _, line in command_lines(example.text):
        assert line.strip() in ci, f"{example.id}: {line.strip()!r} is not what .ci/run runs"


KINDS = {"run": run_command, "flags": run_command, "output": run_output, "python": run_python, "file": check_file,
         "layout": check_layout, "ci": check_ci, "none": None}

EXAMPLES = [e for path in DOCS for e in examples(path) if e.kind and e.kind != "none"]
SLOW = ("--ray", "command")  # a Ray instance; a judge command started per plan


@pytest.mark.parametrize("example", [pytest.param(e, id=e.id, marks=[pytest.mark.slow] if any(
    s in " ".join(e.words or [e.args, e.text.split("\n")[0]]) for s in SLOW) else []) for e in EXAMPLES])
def test_a_documented_example(example, tmp_path, searched):
    KINDS[example.kind](example, tmp_path, searched)


def test_every_block_of_the_docs_is_marked_and_every_marker_known():
    unmarked = [f"{e.id}: {e.text.splitlines()[0][:60]!r}" for path in DOCS for e in examples(path) if not e.kind]
    assert not unmarked, f"blocks with no <!-- test: ... --> before them: {unmarked}"
    assert {e.kind for e in EXAMPLES} <= set(KINDS) and len(EXAMPLES) >= 20, {e.kind for e in EXAMPLES}


def test_the_extras_named_exist():
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    named = {x for path in DOCS for x in re.findall(r"pip install '(?:\.|fp16bisect)\[(\w+)\]'", path.read_text())}
    assert named and named <= set(extras), (named, sorted(extras))


# A wrong flag, a wrong number in a transcript, a wrong Python example: each must fail the example holding it.
WRONG = [("fp16bisect scan MODEL.onnx --inputs X.npz", "fp16bisect scan MODEL.onnx --inputz X.npz", "--inputz"),
         ("4 evaluation(s) on the emulate backend", "5 evaluation(s) on the emulate backend", "5 evaluation(s)"),
         ('result.write("overrides.json")', 'result.writ("overrides.json")', "writ")]


@pytest.mark.parametrize("right, wrong, named", WRONG, ids=["flag", "transcript", "python"])
def test_a_wrong_example_fails(right, wrong, named, tmp_path, searched):
    text = README.read_text(encoding="utf-8")
    assert right in text, f"README no longer holds {right!r}: pick another line to break"
    (bad := tmp_path / "README.md").write_text(text.replace(right, wrong, 1), encoding="utf-8")
    line = text[:text.index(right)].count("\n") + 1
    broken = max((e for e in examples(bad) if e.kind and e.line <= line), key=lambda e: e.line)
    with pytest.raises(BaseException) as failed:
        KINDS[broken.kind](broken, tmp_path / "work", searched)
    assert failed.type.__name__ not in ("Skipped", "Failed") and named in str(failed.value), failed.value


def test_the_readme_is_a_front_page_of_at_most_15_kb():
    """The README is read once: what, install, quick start, the three uses, links; the rest is in docs/."""
    assert len((ROOT / "README.md").read_bytes()) <= 15_000
