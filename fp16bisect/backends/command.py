"""Any runtime as the judge: a shell command evaluates each plan (``--backend command --check 'CMD'``).

For every plan, the command runs in a directory of its own (so several plans
can be evaluated at once), after each placeholder of CMD is replaced by a
shell-quoted path. A search runs it on the most stressing sample first (the FP32
profile's, or the one that failed the last plan) alone, then, if the plan passed
there, once more on the other samples (``evaluation/whole_plans.py``): a failing
plan usually costs one run on one sample. ``check`` runs it once on all samples.

    {model}      the plan's mixed-precision ONNX, as ``fp16bisect apply`` writes it (FP32 inputs and outputs)
    {overrides}  the plan as an override JSON (the result file's schema: fp32_nodes with name, op_type, outputs)
    {original}   the FP32 model given on the command line
    {inputs}     a directory holding sample_0.npz, sample_1.npz, ... (the samples of this run, keyed by input name;
                 samples.txt says which sample each one is), each read and written in turn (one in memory at a time)
    {outputs}    an empty directory: sample_<i>.npz written there (one array per model output) are compared
                 with the references under the tolerance; if nothing is written, the exit code is the verdict

Exit codes as ``git bisect run``: 0 pass (then the outputs, if written, decide),
1-124 and 126-127 fail, 125 this plan cannot be evaluated (a verdict of its own,
never evidence, like a failed build, with the command's last stderr lines), anything else (a
signal, above 127) aborts the search (``CommandAborted``, exit 2; the journal
keeps what was evaluated, so a rerun resumes).

Files live under ``plans_dir`` (beside ``-o``), one directory per evaluation,
removed when it ends unless ``keep_plans``. The command's stdout and stderr go
to files there (``stdout.txt``, ``stderr.txt``), and the exact line run to
``command.txt``.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from fp16bisect.errors import BuildFailed, CouldNotEvaluate, UsageError
from fp16bisect.backends import fingerprint
from fp16bisect.backends.base import Backend, Verdict
from fp16bisect.model.graph import Graph

PLACEHOLDERS = ("model", "overrides", "original", "inputs", "outputs")
PASS, CANNOT_EVALUATE = 0, 125
STDERR_LINES = 3  # of the command's stderr, kept with a failure


class CommandAborted(UsageError):
    """The command exited with a code that stops the search (a signal, or above 127): exit 2, journal kept."""


def substitute(template: str, values: Mapping[str, object]) -> str:
    """``template`` with each ``{name}`` of ``values`` replaced by its shell-quoted value. Other braces stay as they
    are (awk's ``{print $1}``, brace expansion), and so does ``${name}``, a shell variable."""
    if not values:
        return template
    pattern = re.compile(r"(?<!\$)\{(" + "|".join(map(re.escape, values)) + r")\}")
    return pattern.sub(lambda m: shlex.quote(str(values[m.group(1)])), template)


def check_template(template: str, names=PLACEHOLDERS) -> None:
    """A usage error unless the command can know the plan, and names its placeholders unquoted."""
    if not template or not template.strip():
        raise UsageError("--check is empty: give the command that judges a plan, e.g. "
                         "--check 'python judge.py {model} {inputs} {outputs}'")
    used = set(re.findall(r"(?<!\$)\{(\w+)\}", template)) & set(names)
    if not used & {"model", "overrides"}:
        raise UsageError(f"--check {template!r} names neither {{model}} nor {{overrides}}, so it cannot know which "
                         "plan it judges: pass the plan's model ({model}) or its override file ({overrides})")
    quoted = re.search(r"""(['"])\{(""" + "|".join(names) + r""")\}\1""", template)
    if quoted:
        raise UsageError(f"--check quotes the placeholder {quoted.group(0)}: write {{{quoted.group(2)}}} bare, "
                         "fp16bisect quotes each path itself (paths may hold spaces)")


def plan_key(plan) -> str:
    """12 hex digits naming a plan (its sorted node ids), in directory names and progress lines."""
    return hashlib.sha256("\n".join(sorted(plan)).encode("utf-8")).hexdigest()[:12]


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"was killed by signal {-code}"
    if 128 < code < 128 + 65:
        try:
            return f"exited with code {code} (the shell's code for signal {signal.Signals(code - 128).name})"
        except ValueError:
            pass
    return f"exited with code {code}"


class CommandBackend(Backend):
    """Evaluates a plan on the samples it is given by running one shell command. Thread-safe: each evaluation has its
    own directory and shares nothing it writes."""

    name = "command"
    deterministic = True  # the judge is assumed to repeat itself; --repeats N when its builds vary
    evaluation_word, evaluated_thing = "evaluated", "plan"  # no engine of ours: the command evaluates the plan
    uses_device = True  # {device}: the GPU id of the slot a command runs in
    evaluates_in_threads = True  # N concurrent commands: threads here, waiting on them (one backend, thread-safe)
    runs_a_command = True
    strict_versions = ("command",)  # another command is another judge

    def __init__(self, graph: Graph, command: str, *, plans_dir: str | Path = "fp16bisect.plans",
                 keep_plans: bool = False, progress: Callable[[str], None] | None = None,
                 tolerance: dict | None = None):
        check_template(command)
        self.graph = graph
        self.command = command
        self.plans_dir = Path(plans_dir).absolute()
        self.keep_plans = keep_plans
        self.progress: Callable[[str], None] = progress or (lambda text: None)
        self.tolerance = dict(tolerance or {})
        self.outputs = [o.name for o in graph.outputs]
        self.float_outputs = graph.float_output_names()
        self.runs = 0
        self._made_root = False
        self.shown = " ".join(command.split())  # for one-line messages (a --check may span lines)

    # -- what the pipeline records

    def versions(self) -> dict:
        import onnx

        return {"onnx": onnx.__version__}

    def environment(self) -> dict:
        """The command, and what it prints for ``--fingerprint`` when it answers that (``fingerprint.py``)."""
        found = {**super().environment(), "command": self.command}
        printed = fingerprint.ask(self.command, PLACEHOLDERS)
        return {**found, "fingerprint": printed} if printed else found

    @property
    def journal_name(self) -> str:
        """The journal's backend: another command is another judge, whose verdicts must not be replayed."""
        return f"command: {self.command}"

    def describe(self) -> dict:
        """Extra keys of the JSON's ``backend`` section."""
        return {"command": self.command, "plans_dir": str(self.plans_dir), "keep_plans": self.keep_plans}

    # -- evaluation

    def run_plan(self, plan, inputs: Sequence[dict[str, np.ndarray]], repeat: int = 0,
                 placeholders: Mapping[str, object] | None = None):
        """Every given sample's outputs (a list of dicts) when the command wrote them, else a ``Verdict``.
        ``inputs``: a sequence read one sample at a time (``whole_plans.StageInputs``, whose ``sources`` name
        the samples in ``samples.txt``), or a list.
        ``placeholders``: more values to substitute, e.g. ``{"device": 1}`` for an executor that runs plans on
        several GPUs at once."""
        plan = frozenset(plan)
        key = plan_key(plan)
        workdir = self._workdir(key, repeat)
        try:
            paths = self._write(plan, inputs, workdir, repeat)
            line = substitute(self.command, {**{name: paths[name] for name in PLACEHOLDERS}, **(placeholders or {})})
            (workdir / "command.txt").write_text(line + "\n", encoding="utf-8")
            where = f" in {workdir}" if self.keep_plans else ""
            again = f", repeat {repeat}" if repeat else ""
            self.progress(f"running the command on plan {key} ({len(plan)} node(s) in FP32{again}){where}: "
                          f"{self.shown}")
            code = self._execute(line, workdir)
            self.runs += 1
            return self._judge(code, plan, key, workdir, paths["outputs"], len(inputs))
        finally:
            if not self.keep_plans:
                shutil.rmtree(workdir, ignore_errors=True)

    def close(self) -> None:
        """Remove the plans directory if this backend made it and nothing is left in it."""
        if self._made_root and not self.keep_plans:
            try:
                self.plans_dir.rmdir()
            except OSError:
                pass  # not empty (another search's kept plans) or already gone

    # -- steps

    def _workdir(self, key: str, repeat: int) -> Path:
        if not self.plans_dir.is_dir():
            try:
                self.plans_dir.mkdir(parents=True)
                self._made_root = True
            except FileExistsError:
                pass
            except OSError as exc:
                raise UsageError(f"cannot make the plans directory {str(self.plans_dir)!r} ({exc.strerror}): "
                                 "choose another -o path") from None
        suffix = f"-r{repeat}" if repeat else ""
        return Path(tempfile.mkdtemp(prefix=f"{key}{suffix}-", dir=self.plans_dir))

    def _write(self, plan: frozenset, inputs: Sequence[dict], workdir: Path, repeat: int) -> dict[str, Path]:
        from fp16bisect.artifacts.apply import save
        from fp16bisect.artifacts.mixed import convert
        from fp16bisect.artifacts.files import write_json

        paths = {"model": workdir / "model.onnx", "overrides": workdir / "overrides.json",
                 "original": Path(self.graph.path).absolute() if self.graph.path else workdir / "original.onnx",
                 "inputs": workdir / "inputs", "outputs": workdir / "outputs"}
        try:
            mixed = convert(self.graph, plan)
        except UsageError as exc:  # e.g. a constant beyond FP16's range read by an FP16 node: no such model
            raise BuildFailed(f"the mixed-precision model of plan {plan_key(plan)} cannot be written: {exc}") \
                from None
        save(mixed.model, paths["model"])
        write_json(paths["overrides"], self._overrides(plan, repeat))
        if not self.graph.path:
            save(self.graph.model, paths["original"])
        paths["inputs"].mkdir()
        for i in range(len(inputs)):  # one sample's arrays in memory at a time
            np.savez(paths["inputs"] / f"sample_{i}.npz", **inputs[i])
        sources = getattr(inputs, "sources", None)
        if sources:
            (workdir / "samples.txt").write_text("".join(f"sample_{i}.npz\t{source}\n"
                                                         for i, source in enumerate(sources)), encoding="utf-8")
        paths["outputs"].mkdir()
        return paths

    def _overrides(self, plan: frozenset, repeat: int) -> dict:
        """The plan as an override file, by the result file's builder, so a judge reads it as it would the result
        (and ``fp16bisect apply`` accepts it)."""
        from fp16bisect.artifacts.override_json import overrides_file

        from fp16bisect.model.plan_states import accumulating, states

        fp32, accumulate = states(plan)  # FP32-accumulation marks: fp32_accumulate_nodes, written when there are some
        nodes = sorted((self.graph.by_id[i] for i in fp32), key=lambda n: n.index)
        members = {n.id: "" for n in nodes} | {accumulating(i): "" for i in accumulate}
        return overrides_file(self.graph, members, backend={"name": self.name, **self.describe()},
                              tolerance=self.tolerance, metrics={},
                              search={"status": "plan", "plan": plan_key(plan), "repeat": repeat}).to_json()

    def _execute(self, line: str, workdir: Path) -> int:
        with open(workdir / "stdout.txt", "wb") as out, open(workdir / "stderr.txt", "wb") as err:
            try:
                return subprocess.run(line, shell=True, stdin=subprocess.DEVNULL, stdout=out, stderr=err).returncode
            except OSError as exc:  # no shell at all
                raise UsageError(f"cannot run --check {self.shown!r}: {exc}") from None

    def _stderr_tail(self, workdir: Path) -> str:
        try:
            text = (workdir / "stderr.txt").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        tail = " | ".join(lines[-STDERR_LINES:])
        return tail if len(tail) <= 600 else "..." + tail[-597:]

    def _judge(self, code: int, plan: frozenset, key: str, workdir: Path, outputs: Path, samples: int):
        tail = self._stderr_tail(workdir)
        said = f"; stderr: {tail}" if tail else ""
        if code == PASS:
            got = self._read_outputs(outputs, samples, key)
            return got if got is not None else Verdict(True, "exit code 0")
        if code == CANNOT_EVALUATE:
            raise CouldNotEvaluate(kind="cannot_evaluate", message=f"the command exited 125 (cannot evaluate) on plan {key} ({len(plan)} node(s) in "
                              f"FP32){said or '; it wrote nothing to stderr'}")
        if 0 < code <= 127:
            return Verdict(False, f"exit code {code}{said}")
        raise CommandAborted(
            f"the command {describe_exit(code)} on plan {key} ({len(plan)} node(s) in FP32), which stops the search "
            f"(as in git bisect run: 0 pass, 1-127 fail, 125 cannot evaluate, anything else aborts): "
            f"{self.shown}{said}"
        )

    def _read_outputs(self, outputs: Path, samples: int, key: str) -> list[dict] | None:
        """``sample_<i>.npz`` for every sample, or None when the command wrote nothing; anything else is a plan
        that could not be evaluated, with the reason (a judge whose outputs are silently ignored would pass
        every plan on its exit code)."""
        written = sorted(p.name for p in outputs.iterdir()) if outputs.is_dir() else []
        if not written:
            return None
        expected = [f"sample_{i}.npz" for i in range(samples)]
        stray = [n for n in written if n not in expected]
        missing = [n for n in expected if n not in written]
        how = "write sample_<i>.npz for every sample of {inputs} (one array per model output, keyed by its name), " \
              "or nothing and let the exit code judge"
        if stray:
            raise CouldNotEvaluate(kind="outputs", message=f"the command exited 0 on plan {key} and wrote {', '.join(map(repr, stray[:3]))} into "
                              f"{{outputs}}, which holds only sample_0.npz ... sample_{samples - 1}.npz: {how}")
        if missing:
            raise CouldNotEvaluate(kind="outputs", message=f"the command exited 0 on plan {key} and wrote {len(written)} of {samples} output "
                              f"file(s) into {{outputs}}, not {', '.join(missing[:3])}: {how}")
        return [self._read_sample(outputs / name, key) for name in expected]

    def _read_sample(self, path: Path, key: str) -> dict[str, np.ndarray]:
        try:
            with open(path, "rb") as f, np.load(f, allow_pickle=False) as npz:  # numpy leaks its file on a bad zip
                arrays = {name: npz[name] for name in npz.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise CouldNotEvaluate(kind="outputs", message=f"the command exited 0 on plan {key} but {path.name} in {{outputs}} is not a readable "
                              f".npz ({type(exc).__name__}: {exc}): save it with numpy.savez(path, output=array)") \
                from None
        if not all(name in arrays for name in self.float_outputs):
            positional = [f"arr_{i}" for i in range(len(self.outputs))]
            if sorted(arrays) == sorted(positional):  # numpy.savez(path, *arrays): model outputs in order
                arrays = {name: arrays[f"arr_{i}"] for i, name in enumerate(self.outputs)}
        lacking = [name for name in self.float_outputs if name not in arrays]
        if lacking:
            raise CouldNotEvaluate(kind="outputs", message=f"the command exited 0 on plan {key} but {path.name} in {{outputs}} lacks output(s) "
                              f"{', '.join(map(repr, lacking[:3]))} (it holds {', '.join(map(repr, sorted(arrays)[:5])) or 'nothing'}): "
                              "save one array per model output, keyed by the output's name")
        bad = [name for name in self.float_outputs if not np.issubdtype(arrays[name].dtype, np.number)]
        if bad:
            raise CouldNotEvaluate(kind="outputs", message=f"the command exited 0 on plan {key} but output {bad[0]!r} in {path.name} holds "
                              f"{arrays[bad[0]].dtype}, not numbers")
        return {name: arrays[name] for name in self.float_outputs}
