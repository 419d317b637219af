"""The README's examples, run as tests (issue 21, part 7).

README.md is read when the tests are collected, so the next run tests whatever the README says then. Its code
blocks (indented four spaces, or fenced) are sorted into:

* **commands**: a line starting with ``fp16bisect``, ``python``, ``pip``, ``trtexec``, ``$ ``, ``...`` or
  ``--check``. Each runs through ``bash`` in a fresh working directory that links ``sample_models/`` and
  ``scripts/`` from the repository (so README paths work as written and nothing is written into the
  repository), with this environment's ``fp16bisect`` and ``python`` first on PATH. Placeholders (``MODEL.onnx``,
  ``X.npz``, ``'CMD'``, ...) are replaced by the table PLACEHOLDERS, and nothing else. A synopsis with optional
  ``[...]`` groups runs twice: ``minimal`` (its required words only) and ``full`` (every optional group, one
  value of each ``a|b`` by CHOICES, the first alternative of each ``[x | y]``, less the words in
  FULL_RUN_LEAVES_OUT and KNOWN_FAULTS). The exit code must be the one the README gives (``expected_exit``), and
  what each command and flag promises is checked (``check_outcome``: the override JSON of ``-o``, the HTML of
  ``--report``, the CSV columns of ``--csv``, the plan files ``--keep-plans`` keeps, ...). A word that looks
  like a placeholder and has no substitution fails the test, naming what to add to the table.
* **Python**: a ```python block, or an indented block starting with ``import``/``from``. A block that imports
  ``tensorrt`` runs against the test double ``tests/fake_tensorrt.py`` (no GPU here), with the objects the README
  takes as given (``parser``, ``network``, ...: ``python_given``) made for the sample transformer; any other block
  runs in a subprocess in a working directory as above. What its comments say it prints or raises is checked.
* **what the README shows**: a search's console output on a sample model is compared with a fresh run, line by
  line (seconds aside); so is the batch transcript (``$ fp16bisect batch ...``); a block introduced by "`path`:"
  must be (part of) that file; every module and folder the Layout tree names must exist. A block no test runs or
  compares must be listed in NOT_COMPARED with the reason.

Commands that cannot run on this machine (CPU only: no GPU, no trtexec, no Ray cluster, no network) are skipped,
each with its reason, by SKIP below. ``--backend tensorrt`` commands do run: without a GPU the README promises
exit 2 with the fix, and that is checked. The ``slow`` ones (a local Ray instance, a judge command started per
plan) take 1-6 s each; the file takes 35-50 s on 2 cores.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import ROOT, SAMPLES, load_make_samples

README = ROOT / "README.md"
MODEL = "transformer_block"  # the sample model the README's examples run on (README: "on the sample transformer")
CULPRITS = load_make_samples().KNOWN[MODEL]["culprits"]  # what a search of it must keep in FP32

# -- what cannot run here, and why ---------------------------------------------------------------------------------

# (regular expression searched in the command as the README writes it, why it does not run here)
SKIP = [
    (r"^pip install\b", "installs into the running environment and fetches from PyPI (network); this environment "
                        "has fp16bisect installed (editable), CI's .ci/run runs the set-up commands in a fresh venv, "
                        "and test_the_extras_the_readme_installs_exist checks the extras it names"),
    (r"^python -m pytest\b", "the test suite this file belongs to: running it from here would recurse; "
                             "CI's .ci/run runs it"),
    (r"judge_onnxruntime\.py(?!.*--provider cpu)", "the judge's default provider is ONNX Runtime's CUDA provider: "
                                                   "it needs an NVIDIA GPU (the `--provider cpu` line runs)"),
    (r"judge_trtexec\.py", "trtexec on an NVIDIA GPU (tests/test_command_backend.py runs this judge against a "
                           "stand-in trtexec)"),
    (r"^trtexec\b", "TensorRT's trtexec and an NVIDIA GPU"),
    (r"my_npu_compile", "an imaginary NPU toolchain: the shape of a one-line judge, not a command"),
]

# What the README shows that no test here reproduces: (regular expression on the block's first line, why).
NOT_COMPARED = [
    (r"^fp16bisect on rec_planted\.onnx", "PP-OCRv4's recognizer with a planted overflow, made by hand (not in the "
                                           "repository); its command-backend search is run on the sample models"),
    (r"^note: \d+ constant", "BERT and GPT-2 exports made by scripts/export_hf.py (torch and transformers, not "
                             "installed); tests/test_one_definition.py checks these lines on hf_style.py's blocks"),
]

# -- substitutions -------------------------------------------------------------------------------------------------

# A placeholder, or (the flag it follows, the placeholder): what replaces it. Paths are relative to the working
# directory, where sample_models/ and scripts/ are links into the repository; MADE files are written there first.
PLACEHOLDERS = {
    "MODEL.onnx": f"sample_models/{MODEL}.onnx",
    "X.npz": f"sample_models/{MODEL}.npz",
    "Y.npz": "y.npz",  # MADE: a second sample, X plus noise
    "R.npz": "R.npz",  # MADE: FP32 references, one per --inputs (see one_reference_per_input)
    "O.json": "O.json",  # MADE: the override file a search of MODEL.onnx wrote
    "CMD": "python scripts/judge_onnxruntime.py --provider cpu {model} {inputs} {outputs}",  # the CPU judge
    "NODE": "ln1_mean",  # a candidate the search does not keep, so --keep-fp32 adds it
    "MANIFEST.toml|.json": "sample_models/batch.toml",
    "MODEL.mixed.onnx": f"{MODEL}.mixed.onnx",
    "FILE.html": "report.html",
    ("--json", "FILE"): "result.json",
    ("--csv", "FILE"): "nodes.csv",
    ("--timing-cache", "FILE"): "timing.cache",
    ("--atol", "A"): "0.01",
    ("--rtol", "R"): "0.01",
    ("--min-cosine", "C"): "0.99",
    ("--max-mismatch", "F"): "0.0",
    ("--repeats", "N"): "2",
    ("--jobs", "N"): "2",
    ("--top", "N"): "5",
    ("--opt-level", "N"): "1",
    ("--opt-level", "0-5"): "1",
    ("--devices", "0,1,..."): "0,1",
}
# ``a|b|c`` after these flags in a full run (else the first alternative)
CHOICES = {
    "--backend": "command",  # the search synopsis also offers --check 'CMD' and --keep-plans, which need it
    "--typing": "strong",  # weak builds need TensorRT 10.x
    "--prior": "auto",
}
# Optional words a full run leaves out (a group starting with one is dropped; an alternative starting with one is
# not chosen), and why.
FULL_RUN_LEAVES_OUT = {
    "--ray": "starts a Ray instance (about 6 s here): the parallel block's `--ray` line runs it on its own",
    "ADDRESS": "the address of a running Ray cluster: there is none here",
}
# A known fault a full run steps around, with what it does: (the flag and value that bring it, the flags left out).
# Remove the entry once the fault is fixed, so that the README's full synopsis runs whole again.
KNOWN_FAULTS: list = []  # (flag, value), flags a full run leaves out, why: none known now
PROGRAMS = ("fp16bisect", "python", "python3", "pip", "trtexec")


# -- the README's code blocks --------------------------------------------------------------------------------------

@dataclass
class Block:
    line: int  # README line of its first line
    lang: str  # a fenced block's info string; "" for an indented block
    text: str
    before: str  # the last prose line before it


@dataclass
class Command:
    block: Block
    line: int
    text: str  # as the README writes it: continuation lines joined, comment removed
    output: list[str] = field(default_factory=list)  # a ``$ `` transcript: the lines shown after it


def readme_blocks(text: str) -> list[Block]:
    lines = text.split("\n")
    blocks, prose, i = [], "", 0
    while i < len(lines):
        line = lines[i]
        fence = re.match(r"^(```+|~~~+)\s*([\w+-]*)", line)
        if fence:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith(fence.group(1))), len(lines))
            blocks.append(Block(i + 1, fence.group(2).lower(), "\n".join(lines[i + 1:end]), prose))
            i = end + 1
            continue
        if line.startswith("    ") and line.strip() and (i == 0 or not lines[i - 1].strip()):
            body, start = [], i
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                body.append(lines[i][4:])
                i += 1
            while body and not body[-1].strip():
                body.pop()
            blocks.append(Block(start + 1, "", "\n".join(body), prose))
            continue
        if line.strip():
            prose = line.strip()
        i += 1
    return blocks


def strip_comment(line: str) -> str:
    """The line without a trailing ``# comment`` (a ``#`` inside quotes stays)."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


OUTPUT_HEADER = re.compile(r"^fp16bisect (\w+ )?(on|of) ")  # what the CLI prints first: "fp16bisect on MODEL (...)"


def starts_command(line: str) -> bool:
    words = line.split()
    return bool(words) and (words[0] in PROGRAMS or words[0] in ("$", "...", "--check")) and \
        not OUTPUT_HEADER.match(line)


def is_python(block: Block) -> bool:
    first = block.text.lstrip().split("\n", 1)[0]
    return block.lang in ("python", "py", "python3") or (not block.lang and re.match(r"(import|from) \w", first))


def block_commands(block: Block) -> list[Command]:
    """The commands of a block that holds any (a line starting with a program, ``$ ``, ``...`` or ``--check``).
    A line that starts with a space, or follows one ending in ``\\``, goes on with the command before it; in a
    transcript (a block starting with ``$ ``) the lines after a command are what it printed."""
    if is_python(block) or block.lang not in ("", "sh", "bash", "shell", "console"):
        return []
    lines = block.text.split("\n")
    if not any(starts_command(line) for line in lines):
        return []
    transcript = lines[0].startswith("$ ")
    found: list[Command] = []
    continued = False
    for n, raw in enumerate(lines):
        if transcript:
            if raw.startswith("$ "):
                found.append(Command(block, block.line + n, raw[2:].strip()))
            elif found:
                found[-1].output.append(raw)
            continue
        line = strip_comment(raw)
        if not line.strip():
            continued = False
            continue
        if found and (continued or raw[:1].isspace()):
            found[-1].text += " " + line.strip().rstrip("\\").strip()  # a wrapped synopsis, a continuation
        elif starts_command(line):
            found.append(Command(block, block.line + n, line.rstrip("\\").strip()))
        continued = line.endswith("\\")
    return found


def readme() -> str:
    return README.read_text(encoding="utf-8")


BLOCKS = readme_blocks(readme())
COMMANDS = [c for b in BLOCKS for c in block_commands(b)]


# -- synopses: [optional] groups, a|b alternatives -------------------------------------------------------------------

@dataclass
class Group:
    alternatives: list  # each a list of words and Groups


def tokens(text: str) -> list[str]:
    lexer = shlex.shlex(text, posix=True, punctuation_chars="[]")
    lexer.whitespace_split = True
    out = []
    for token in lexer:
        out += list(token) if set(token) <= set("[]") else [token]  # "]]" is two closings
    return out


def parse(words: list[str]) -> list:
    def sequence(i: int, inside: bool):
        items, alternatives = [], []
        while i < len(words):
            word = words[i]
            if word == "[":
                group, i = sequence(i + 1, True)
                items.append(group)
                continue
            if word == "]" and inside:
                return Group([*alternatives, items]), i + 1
            if word == "|" and inside:
                alternatives.append(items)
                items = []
            else:
                items.append(word)
            i += 1
        if inside:
            raise ValueError(f"unclosed [ in {' '.join(words)!r}")
        return items, i

    return sequence(0, False)[0]


def is_flag(word) -> bool:
    return isinstance(word, str) and word.startswith("-") and word not in ("-", "--")


def expand(items: list, full: bool) -> list[str]:
    """The words of a synopsis: ``minimal`` drops every optional group; ``full`` keeps them (see the module doc).
    A group that follows a flag is that flag's optional value; a group of words that are not flags is prose
    (e.g. "[tolerance and backend flags as for search]") and is dropped."""
    out: list[str] = []
    for k, item in enumerate(items):
        if isinstance(item, str):
            out.append(item)
            continue
        if not full:
            continue
        usable = [alt for alt in item.alternatives if alt and not (isinstance(alt[0], str) and
                                                                   alt[0] in FULL_RUN_LEAVES_OUT)]
        if not usable:
            continue
        chosen = usable[0]
        value_of_flag = k > 0 and is_flag(items[k - 1])
        if not value_of_flag and not is_flag(chosen[0]):
            continue  # prose
        out += expand(chosen, full)
    return out


class Unmapped(Exception):
    pass


def looks_like_placeholder(word: str) -> bool:
    return not is_flag(word) and (bool(re.search(r"[A-Z]", word)) or "..." in word.strip("."))


def substitute(words: list[str]) -> list[str]:
    """Placeholders replaced by the table; ``...`` (repeat) dropped; ``a|b`` resolved by CHOICES."""
    out: list[str] = []
    for word in words:
        if word == "...":
            continue
        flag = out[-1] if out and is_flag(out[-1]) else None
        if (flag, word) in PLACEHOLDERS:
            out.append(PLACEHOLDERS[(flag, word)])
        elif word in PLACEHOLDERS:
            out.append(PLACEHOLDERS[word])
        elif " " in word:
            out.append(word)  # a quoted command: its words are the command's own
        elif "|" in word and not looks_like_placeholder(word):
            options = word.split("|")
            out.append(CHOICES.get(flag, options[0]) if CHOICES.get(flag, options[0]) in options else options[0])
        elif looks_like_placeholder(word):
            raise Unmapped(f"no substitution for {word!r}" + (f" after {flag}" if flag else "")
                           + ": add it to PLACEHOLDERS (or the command to SKIP, with the reason)")
        else:
            out.append(word)
    return out


# -- the cases -------------------------------------------------------------------------------------------------------

@dataclass
class Case:
    command: Command
    variant: str  # "as written", "minimal" or "full"
    argv: list[str] | None = None  # None: skipped
    skip: str = ""
    error: str = ""  # a command that cannot be mapped: the test fails with this


def skip_reason(text: str) -> str:
    return next((reason for pattern, reason in SKIP if re.search(pattern, text)), "")


def avoid_known_faults(argv: list[str]) -> list[str]:
    """A full run without the flags that bring a fault of KNOWN_FAULTS (optional flags only)."""
    for (flag, value_), leave_out, _why in KNOWN_FAULTS:
        if flag in argv and argv[argv.index(flag) + 1] == value_:
            for other in leave_out:
                while other in argv:
                    at = argv.index(other)
                    del argv[at:at + 2]
    return argv


def split_and(text: str) -> list[str]:
    """``a && b`` -> [a, b]; an ``&&`` inside quotes belongs to a quoted command."""
    parts, quote, start = [], None, 0
    for i, c in enumerate(text):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif text.startswith("&&", i) and i >= start:
            parts.append(text[start:i].strip())
            start = i + 2
    return [p for p in [*parts, text[start:].strip()] if p]


def resolve_ellipsis(command: Command, previous: Command | None) -> str:
    """``... --check 'X'`` (README: the previous command with another --check) -> the previous command's words up
    to the word this line goes on from, then this line's."""
    rest = command.text[3:].strip()
    if previous is None:
        raise Unmapped("'...' with no command before it in its block")
    first = rest.split()[0]
    head = previous.text.split(" " + first + " ")[0] if f" {first} " in previous.text else previous.text
    return head + " " + rest


def cases() -> list[Case]:
    found = []
    for i, command in enumerate(COMMANDS):
        if command.output:
            continue  # a transcript: test_a_transcript_matches_a_fresh_run runs it
        text = command.text
        if text.startswith("... "):
            prev = COMMANDS[i - 1] if i and COMMANDS[i - 1].block is command.block else None
            try:
                text = resolve_ellipsis(command, prev)
            except Unmapped as exc:
                found.append(Case(command, "as written", error=str(exc)))
                continue
        if text.startswith("--check "):
            text = "fp16bisect search MODEL.onnx --inputs X.npz --backend command " + text  # a flag shown alone
        for part in split_and(text):
            reason = skip_reason(part)
            if reason:
                found.append(Case(command, part.split()[0] + " (skipped)", skip=reason))
                continue
            try:
                items = parse(tokens(part))
            except ValueError as exc:
                found.append(Case(command, "as written", error=str(exc)))
                continue
            variants = {"as written": items} if all(isinstance(x, str) for x in items) else {
                "minimal": items, "full": items}
            seen = []
            for variant, tree in variants.items():
                try:
                    argv = substitute(expand(tree, variant != "minimal"))
                    if variant == "full":
                        argv = avoid_known_faults(argv)
                except Unmapped as exc:
                    found.append(Case(command, variant, error=str(exc)))
                    continue
                if argv in seen:
                    continue  # a full run with nothing optional left to add
                seen.append(argv)
                found.append(Case(command, variant, argv=argv))
    return found


CASES = cases()


def case_id(case: Case) -> str:
    words = case.command.text.split()
    what = "-".join(w for w in words[:3] if re.match(r"^[\w.-]+$", w))[:40]
    return f"L{case.command.line}-{what}-{case.variant.replace(' ', '_')}"


def marks(case: Case):
    slow = case.argv and ("--ray" in case.argv or "command" in case.argv)  # Ray; a judge started per plan
    return [pytest.mark.slow] if slow else []


# -- running -------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def searched(tmp_path_factory) -> Path:
    """The override file a search of the sample transformer writes (the README's set-up command's)."""
    where = workdir(tmp_path_factory.mktemp("searched"))
    done = shell(where, f"fp16bisect search sample_models/{MODEL}.onnx --inputs sample_models/{MODEL}.npz "
                        "-o overrides.json -q")
    assert done.returncode == 0, done.stderr
    return where / "overrides.json"


def workdir(path: Path) -> Path:
    for name in ("sample_models", "scripts"):
        (path / name).symlink_to(ROOT / name, target_is_directory=True)
    return path


def environment() -> dict:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")  # this fp16bisect and python
    return env


def shell(where: Path, command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=where, env=environment(), capture_output=True, text=True,
                          timeout=600)


def fp32_outputs(inputs: Path) -> dict:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(SAMPLES / f"{MODEL}.onnx"), providers=["CPUExecutionProvider"])
    data = np.load(inputs)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, {k: data[k] for k in data.files})))


def one_reference_per_input(argv: list[str], where: Path) -> list[str]:
    """README: "--reference: expected outputs, one .npz per --inputs": R.npz stands for as many references as
    there are --inputs, each made here by an FP32 ONNX Runtime run of that input."""
    if "--reference" not in argv:
        return argv
    out, inputs = [], []
    skip = False
    for k, word in enumerate(argv):
        if skip:
            skip = False
            continue
        if word == "--reference":
            skip = True
            continue
        if k and argv[k - 1] == "--inputs":
            inputs.append(word)
        out.append(word)
    for i, path in enumerate(inputs):
        np.savez(where / f"R_{i}.npz", **fp32_outputs(where / path))
        out += ["--reference", f"R_{i}.npz"]
    return out


def prepare(where: Path, argv: list[str], searched: Path) -> list[str]:
    """The MADE files of PLACEHOLDERS, and the override file ``apply`` reads."""
    x = np.load(SAMPLES / f"{MODEL}.npz")["x"]
    noise = np.random.default_rng(0).normal(scale=0.1, size=x.shape)
    np.savez(where / "y.npz", x=(x + noise).astype(np.float32))
    shutil.copy(searched, where / "O.json")
    if argv[:2] == ["fp16bisect", "apply"] and not (where / argv[2]).exists():
        shutil.copy(searched, where / argv[2])
    return one_reference_per_input(argv, where)


def value(argv: list[str], flag: str, default=None):
    return argv[argv.index(flag) + 1] if flag in argv else default


def tensorrt_runs_here() -> bool:
    from fp16bisect.backends import tensorrt_usable

    return tensorrt_usable()


def expected_exit(argv: list[str]) -> int:
    """README "Exit codes": 0 done; check: 1 when the model misses the tolerance (the sample transformer in
    all-FP16 does; with the overrides a search wrote it does not); tensorrt without a GPU: 2 with the fix."""
    if value(argv, "--backend") == "tensorrt" and not tensorrt_runs_here():
        return 2
    if argv[1] == "check":
        return 0 if "--overrides" in argv else 1
    return 0


# -- what each command promises --------------------------------------------------------------------------------------

def readme_list(pattern: str) -> list[str]:
    """Backticked names in the README sentence that ``pattern`` finds (its group 1)."""
    found = re.search(pattern, " ".join(readme().split()))
    assert found, f"the README no longer says {pattern!r}: update test_readme.py"
    return re.findall(r"`([^`]+)`", found.group(1))


def assert_html_report(path: Path) -> None:
    """README: "one self-contained HTML file, plots inline"."""
    html = path.read_text(encoding="utf-8")
    assert html.lstrip().lower().startswith("<!doctype html") and "<svg" in html, path
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html), "the report loads something from outside"


def assert_plans_kept(plans: Path) -> None:
    """README: with --keep-plans every plan's files stay, in a directory of their own."""
    kept = [p for p in plans.iterdir() if p.is_dir()] if plans.is_dir() else []
    assert kept, f"--keep-plans kept nothing in {plans}"
    listed = readme_list(r"`\./fp16bisect\.plans/`\) holding (.*?)\. It is removed")
    for plan in kept:
        have = {p.name + ("/" if p.is_dir() else "") for p in plan.iterdir()}
        assert set(listed) <= have, (plan.name, sorted(set(listed) - have))


def assert_override_json(path: Path, argv: list[str]) -> None:
    data = json.loads(path.read_text())
    assert data["schema"] == "fp16bisect.overrides/1"
    assert sorted(n["name"] for n in data["fp32_nodes"]) == sorted(CULPRITS), data["fp32_nodes"]
    assert data["search"]["minimal"], data["search"]
    for flag, key in (("--atol", "atol"), ("--rtol", "rtol"), ("--min-cosine", "min_cosine"),
                      ("--max-mismatch", "max_mismatch")):
        if flag in argv:  # README: the tolerance in force is recorded in the JSON
            assert data["tolerance"][key] == float(value(argv, flag)), (key, data["tolerance"])
    if "--repeats" in argv:
        assert data["search"]["repeats"] == int(value(argv, "--repeats"))
    if value(argv, "--backend") == "command":
        assert data["backend"]["name"] == "command"
        if value(argv, "--prior", "auto") == "auto":  # README: --prior auto uses the emulator on another backend
            assert data["prior"]["backend"] == "emulate" and data["prior"]["agreed"], data["prior"]
    if "--keep-plans" in argv:  # README: beside -o, overrides.json -> overrides.plans/
        assert_plans_kept(path.with_suffix(".plans"))


def check_outcome(argv: list[str], where: Path, done: subprocess.CompletedProcess) -> None:
    """What the README says each command and flag gives, beyond its exit code."""
    sub, out = argv[1], done.stdout
    if "-q" in argv:  # README: progress goes to stderr, "-q for none"
        assert done.stderr == "", done.stderr
    if "--report" in argv:
        assert_html_report(where / value(argv, "--report"))
    if sub == "search":
        assert "all FP16: max error" in out and "with overrides: max error" in out, out
        assert all(f"  {c}  " in out for c in CULPRITS) and "evaluation(s)" in out, out
        assert_override_json(where / value(argv, "-o", "overrides.json"), argv)
        jobs = value(argv, "--jobs") or (str(len(value(argv, "--devices").split(","))) if "--devices" in argv
                                         else None)
        if jobs:  # README: "The console's last line adds (R round(s), up to N at once)"
            assert re.search(rf"\(\d+ round\(s\), up to {jobs} at once\)", out), out
    elif sub == "check":
        said = re.search(r"It prints a per-output table \((.*?)\) and one verdict line", " ".join(readme().split()))
        assert said, "the README no longer lists check's columns: update test_readme.py"
        columns = said.group(1).split(", ")
        header = next(line for line in out.splitlines() if "output" in line and "pass" in line)
        assert all(c in header for c in columns), (columns, header)
        verdict = "PASS" if done.returncode == 0 else "FAIL"
        assert any(line.startswith(verdict) for line in out.splitlines()), out
        if "--json" in argv:  # README: `check --json` has `verdict_from`
            data = json.loads((where / value(argv, "--json")).read_text())
            assert data["passed"] == (done.returncode == 0) and data["verdict_from"] in ("outputs", "exit_code")
        if "--keep-plans" in argv:  # README: for check, beside --json, else ./fp16bisect.plans/
            json_path = value(argv, "--json")
            assert_plans_kept(where / (Path(json_path).with_suffix(".plans") if json_path else "fp16bisect.plans"))
    elif sub == "scan":
        if "--json" in argv:  # README: "the candidates in the order the search will try them"
            data = json.loads((where / value(argv, "--json")).read_text())
            assert {n["name"] for n in data["nodes"][:len(CULPRITS)]} == set(CULPRITS), data["nodes"][:3]
        assert all(c in out for c in CULPRITS), out
    elif sub == "compare":
        if "--overrides" in argv:  # README: "with the overrides a search wrote, no node fails"
            assert "no node fails" in out, out
        else:  # README: "The first failing node in topological order is where the error is born"
            first = re.search(r"first failing node: (\S+)", out)
            assert first and first.group(1) in CULPRITS, out
        if "--csv" in argv:
            columns = readme_list(r"`--csv` writes every node's row \(columns (`[^`]+`)\)")[0].split(", ")
            rows = (where / value(argv, "--csv")).read_text().splitlines()
            assert rows[0].split(",") == columns and len(rows) > 1, rows[:2]
            if "--overrides" in argv:
                assert all(r.endswith(",True") for r in rows[1:]), [r for r in rows[1:] if not r.endswith(",True")]
    elif sub == "apply":
        written = onnx.load(where / value(argv, "-o"))
        onnx.checker.check_model(written, full_check=True)  # README: passes onnx.checker with full type checking
        want = onnx.TensorProto.FLOAT16 if "--fp16-io" in argv else onnx.TensorProto.FLOAT  # README: --fp16-io
        assert [i.type.tensor_type.elem_type for i in written.graph.input] == [want] * len(written.graph.input)
        pinned = re.search(r"pinned in FP32 \(([^)]*)\)", out)
        assert pinned, out
        assert set(CULPRITS) | ({value(argv, "--keep-fp32")} if "--keep-fp32" in argv else set()) == set(
            pinned.group(1).split(", ")), out
        if "--verify" in argv:
            assert "verified" in out, out
    elif sub == "batch":
        manifest = (where / argv[2]).read_text()
        entries = len(re.findall(r"^\[\[entry\]\]", manifest, re.M))
        assert f"{entries} of {entries} entries passed" in out, out
        if "--json" in argv:  # README: {"schema": "fp16bisect.batch/1", "manifest", "passed", "entries": [...]}
            data = json.loads((where / value(argv, "--json")).read_text())
            assert data["schema"] == "fp16bisect.batch/1" and data["passed"] is True
            assert len(data["entries"]) == entries and {e["verdict"] for e in data["entries"]} <= {"FOUND", "PASS"}


def run_case(case: Case, where: Path, searched: Path) -> subprocess.CompletedProcess:
    argv = prepare(workdir(where), case.argv, searched)
    done = shell(where, shlex.join(argv))
    context = f"README line {case.command.line}: {shlex.join(argv)}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    want = expected_exit(argv)
    assert done.returncode == want, context
    if want == 2:  # README: "TensorRT missing, or no GPU: exit 2 with the fix"
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("fp16bisect: error: ") and ("--backend emulate" in last or "pip install" in last), \
            context
    else:
        check_outcome(argv, where, done)
    return done


@pytest.mark.parametrize("case", [pytest.param(c, id=case_id(c), marks=marks(c)) for c in CASES])
def test_readme_command(case, tmp_path, searched):
    if case.error:
        pytest.fail(f"README line {case.command.line}: {case.command.text!r}: {case.error}")
    if case.skip:
        pytest.skip(case.skip)
    run_case(case, tmp_path, searched)


def test_the_readme_has_commands_to_run():
    """The parser still finds the README's commands (a README rewritten into a form it misses would leave the
    tests above with nothing to run): the set-up search runs as written, and every subcommand the README shows a
    command line of has one that runs here."""
    runnable = [c for c in CASES if c.argv]
    assert any(c.variant == "as written" and c.argv[:2] == ["fp16bisect", "search"] for c in runnable)
    shown = {c.text.split()[1] for c in COMMANDS if c.text.startswith("fp16bisect ")}
    assert {"search", "check", "scan", "compare", "apply", "batch"} <= shown
    assert shown <= {c.argv[1] for c in runnable if c.argv[0] == "fp16bisect"}


def test_every_flag_of_every_synopsis_is_in_the_commands_help():
    """Also the flags of lines that are skipped, and those a full run leaves out: the CLI knows them all."""
    helps = {}
    for command in COMMANDS:
        words = tokens(command.text)
        if words[:1] != ["fp16bisect"] or len(words) < 2:
            continue
        sub = words[1]
        if sub not in helps:
            done = shell(ROOT, f"fp16bisect {sub} --help")
            assert done.returncode == 0, done.stderr
            helps[sub] = set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", done.stdout))
        unknown = sorted({w for w in words if is_flag(w) and " " not in w} - helps[sub])
        assert not unknown, f"README line {command.line}: fp16bisect {sub} does not know {unknown}"


# -- what the README shows -----------------------------------------------------------------------------------------

def normalized(lines) -> list[str]:
    """Seconds vary from run to run."""
    return [re.sub(r"\bin \d+(\.\d+)? s\b", "in N s", line.rstrip()) for line in lines if line.strip()]


SEARCH_OUTPUTS = [b for b in BLOCKS if b.text.startswith("fp16bisect on ")]


def not_compared(block: Block) -> str:
    return next((why for pattern, why in NOT_COMPARED if re.search(pattern, block.text.split("\n", 1)[0])), "")


@pytest.mark.parametrize("block", SEARCH_OUTPUTS, ids=[f"L{b.line}" for b in SEARCH_OUTPUTS])
def test_the_search_prints_what_the_readme_shows(block, tmp_path):
    """README: "What it prints on the sample transformer": the same lines from a fresh run, seconds aside."""
    reason = not_compared(block)
    if reason:
        pytest.skip(reason)
    header = re.match(r"fp16bisect on (\S+) \((\w+) backend; atol ([\d.e-]+), rtol ([\d.e-]+)\)", block.text)
    written = re.search(r"overrides written to (\S+)$", block.text)
    assert header and written, f"README line {block.line}: a search output this test cannot read"
    model, backend, atol, rtol = header.groups()
    assert (ROOT / model).exists(), f"README line {block.line}: {model} is not in the repository"
    done = shell(workdir(tmp_path), f"fp16bisect search {model} --inputs {model[:-len('.onnx')]}.npz --backend "
                                    f"{backend} --atol {atol} --rtol {rtol} -o {written.group(1)}")
    assert done.returncode == 0, done.stderr
    assert normalized(done.stdout.splitlines()) == normalized(block.text.splitlines())
    assert json.loads((tmp_path / written.group(1)).read_text())["schema"] == "fp16bisect.overrides/1"


TRANSCRIPTS = [c for c in COMMANDS if c.output]


def batch_table(lines, evaluations: bool) -> list[str]:
    """A batch table's lines, whitespace evened out, seconds (and unless ``evaluations``, evaluations) dropped."""
    rows = []
    for line in lines:
        row = re.match(r"^(\S+\s+\S+\s+\S+\s+\d+)\s+(\d+)\s+[\d.]+$", line.strip())
        if row:
            rows.append(" ".join((row.group(1) + (" " + row.group(2) if evaluations else "")).split()))
        elif line.strip():
            rows.append(" ".join(line.split()))
    return rows


@pytest.mark.slow
@pytest.mark.parametrize("command", TRANSCRIPTS, ids=[f"L{c.line}" for c in TRANSCRIPTS])
def test_a_transcript_matches_a_fresh_run(command, tmp_path):
    """``$ command`` and what it printed: exit 0 and the same lines (model, action, verdict, set size; seconds vary,
    and the evaluations are test_transcript_evaluations')."""
    reason = skip_reason(command.text)
    if reason:
        pytest.skip(reason)
    done = shell(workdir(tmp_path), command.text)
    assert done.returncode == 0, done.stderr  # README: "Exit 0"
    assert batch_table(done.stdout.splitlines(), False) == batch_table(command.output, False), done.stdout
    if "--json" in command.text:
        data = json.loads((tmp_path / value(command.text.split(), "--json")).read_text())
        shown = [line for line in command.output if re.search(r"\s(FOUND|PASS|FAIL|NOT MINIMAL|ERROR)\s", line)]
        assert data["passed"] is True and len(data["entries"]) == len(shown)


@pytest.mark.parametrize("command", TRANSCRIPTS, ids=[f"L{c.line}" for c in TRANSCRIPTS])
def test_transcript_evaluations(command, tmp_path):
    done = shell(workdir(tmp_path), command.text.replace("--ray", "--jobs 2"))  # README: the same sets either way
    assert done.returncode == 0, done.stderr
    assert batch_table(done.stdout.splitlines(), True) == batch_table(command.output, True), done.stdout


SHOWN_FILES = [b for b in BLOCKS if re.search(r"`([\w./-]+)`:$", b.before)]


def sections(text: str) -> list[str]:
    """A file's paragraphs, comment lines left out."""
    kept = "\n".join(line for line in text.strip().split("\n") if not line.lstrip().startswith("#"))
    return [s.strip() for s in re.split(r"\n\s*\n", kept) if s.strip()]


@pytest.mark.parametrize("block", SHOWN_FILES, ids=[f"L{b.line}" for b in SHOWN_FILES])
def test_a_file_the_readme_shows_is_that_file(block):
    """A block after "`path`:" shows that file, or some of its paragraphs (tables of a manifest), in its order."""
    path = ROOT / re.search(r"`([\w./-]+)`:$", block.before).group(1)
    assert path.is_file(), f"README line {block.line} shows {path}, which does not exist"
    shown, whole = sections(block.text), sections(path.read_text())
    at = 0
    for paragraph in shown:
        assert paragraph in whole[at:], f"README line {block.line}: not in {path} (in this order):\n{paragraph}"
        at = whole.index(paragraph, at) + 1


def test_the_layout_names_files_that_exist():
    """Every module (``name.py``) and folder (``name/``) README's Layout tree names exists in the package (a
    module named with its folder, ``backends/base.py``, exactly there)."""
    tree = next((b for b in BLOCKS if b.text.startswith("fp16bisect/")), None)
    assert tree is not None, "README's Layout tree is gone: update test_readme.py"
    package = ROOT / "fp16bisect"
    text = re.sub(r"`[^`]*\s[^`]*`", " ", tree.text)  # code quoted in a description, e.g. `from x import y`
    names = set(re.findall(r"(?<![\w/.])((?:\w+/)*\w+\.py|\w+/)(?![\w/])", text)) - {"fp16bisect/"}
    modules = {p.relative_to(package).as_posix() for p in package.rglob("*.py")}
    folders = {p.relative_to(package).as_posix() + "/" for p in package.rglob("*") if p.is_dir()}
    missing = [n for n in sorted(names) if not any(have == n or have.endswith("/" + n)
                                                   for have in (folders if n.endswith("/") else modules))]
    assert len(names) >= 10, f"read only {sorted(names)} from README's Layout tree: update test_readme.py"
    assert not missing, f"README's Layout names files that do not exist in fp16bisect/: {missing}"


def test_the_extras_the_readme_installs_exist():
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    named = set(re.findall(r"pip install '(?:\.|fp16bisect)\[(\w+)\]'", readme()))
    assert named and named <= set(extras), (named, sorted(extras))


def test_ci_runs_the_set_up_commands():
    """README: "CI (`.ci/run`) runs exactly these two commands in a fresh virtual environment"."""
    ci = (ROOT / ".ci" / "run").read_text()
    ci = re.sub(r'"\$work/([^"]+)"', r"\1", ci.replace("pip install -q ", "pip install "))
    section = readme().split("## Set-up", 1)[1].split("\n## ", 1)[0]
    commands = [c.text for b in readme_blocks(section) for c in block_commands(b)]
    assert len(commands) == 2, commands
    for command in commands:
        assert command in ci, f"{command!r} is not what .ci/run runs"


# -- Python blocks ---------------------------------------------------------------------------------------------------

PYTHON_BLOCKS = [b for b in BLOCKS if is_python(b)]


def python_given(trt) -> dict:
    """What a README block that imports tensorrt takes as given ("your network, as usual"): the sample
    transformer's network, parsed by the test double's parser, its builder, config and runtime."""
    builder = trt.Builder(None)
    network = builder.create_network(0)
    return {"builder": builder, "network": network, "parser": trt.OnnxParser(network, None),
            "config": builder.create_builder_config(), "runtime": trt.Runtime(None),
            "onnx_bytes": (SAMPLES / f"{MODEL}.onnx").read_bytes()}


def said(block: Block, code: str) -> re.Pattern:
    """The README's comment on the line with ``code``: its first quoted text, as a pattern (digits stand for any
    number, "..." for anything)."""
    line = next((line for line in block.text.split("\n") if code in line and "#" in line), None)
    assert line, f"README line {block.line}: no comment on {code!r} says what it gives"
    quoted = re.search(r'#\s*"([^"]+)"', line)
    assert quoted, line
    pattern = re.escape(quoted.group(1)).replace(r"\.\.\.", ".*")
    return re.compile(re.sub(r"\d+", r"\\d+", pattern))


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=[f"L{b.line}" for b in PYTHON_BLOCKS])
def test_a_python_block_runs(block, tmp_path, searched, monkeypatch, capsys):
    where = workdir(tmp_path)
    shutil.copy(searched, where / "overrides.json")
    if not re.search(r"^\s*import tensorrt\b", block.text, re.M):
        done = subprocess.run([sys.executable, "-c", block.text], cwd=where, env=environment(),
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        return
    import fake_tensorrt

    trt = fake_tensorrt.make(weak=True)  # TensorRT 10 with weak typing; no GPU needed
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    monkeypatch.chdir(where)
    given = python_given(trt)
    exec(compile(block.text, f"README.md:{block.line}", "exec"), given)
    printed = capsys.readouterr().out.strip()
    assert said(block, "print(applied)").fullmatch(printed), printed  # e.g. "2 layer(s) kept in FP32"
    assert {p.node for p in given["applied"].layers} == set(CULPRITS) and given["applied"].missing == []
    assert given["check"].ok
    # the same pipeline when TensorRT fuses a pinned node with FP16 neighbours: the block stops, saying so
    trt._myelin = [[CULPRITS[0], CULPRITS[-1], "ln1_add_eps"]]
    with pytest.raises(SystemExit) as stopped:
        exec(compile(block.text, f"README.md:{block.line}", "exec"), python_given(trt))
    assert said(block, "raise SystemExit").fullmatch(str(stopped.value)), stopped.value


def test_every_code_block_is_run_compared_or_listed():
    """So that the README cannot grow a block no test looks at: each is a command block, a Python block, a search
    output, a file it shows, the Layout tree, or listed in NOT_COMPARED with the reason."""
    handled = {id(b) for b in [*PYTHON_BLOCKS, *SEARCH_OUTPUTS, *SHOWN_FILES]} | {id(c.block) for c in COMMANDS}
    loose = [f"line {b.line}: {b.text.splitlines()[0][:60]!r}" for b in BLOCKS
             if id(b) not in handled and not b.text.startswith("fp16bisect/") and not not_compared(b)]
    assert not loose, f"README blocks no test runs or compares; add them to NOT_COMPARED with why: {loose}"
