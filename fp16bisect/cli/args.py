"""Argument groups, each defined once: its flags, their defaults, and their parsing into a typed value.

A subcommand composes the groups it takes (``main.build_parser``); a command asks each group for its value
(``commands``): ``Samples`` (the model and its sample inputs), ``ToleranceArgs`` -> ``Tolerance``,
``BackendArgs`` -> backend ``Options``, ``ParallelArgs`` -> ``Parallel``, ``OutputArgs`` (files written beside
the console output, checked writable before any work; ``-q``).
"""

from __future__ import annotations

import argparse
from contextlib import contextmanager
from typing import Iterator

from fp16bisect.backends import FLAGS, Options, check_options
from fp16bisect.errors import UsageError
from fp16bisect.run.options import BACKENDS
from fp16bisect.tolerance import DEFAULT_ATOL, DEFAULT_RTOL, GivenTolerance, Tolerance


def jobs(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give the number of evaluations to run at once, 1 or more")
    return value


class Samples:
    """The FP32 model (``model=False``: the subcommand names it itself) and its samples (``--inputs`` and
    ``--data-loader-script``, with ``references`` their ``--reference`` outputs; ``profile``: the deployment's
    input shapes, ``--min-shapes/--opt-shapes/--max-shapes``). ``args.inputs`` lists every source, a data-loader
    script as ``FILE.py:FUNC`` (``model/sources.py`` reads them)."""

    def __init__(self, title: str = "inputs", *, model: bool = True, required: bool = True,
                 references: bool = True, profile: bool = False):
        self.title, self.model, self.required, self.references = title, model, required, references
        self.profile = profile

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        g = parser.add_argument_group(self.title)
        parser.set_defaults(samples_required=self.required)
        if self.model:
            g.add_argument("model", metavar="MODEL", help="the ONNX model (FP32)")
        # not required by argparse: --data-loader-script also gives inputs (no sample at all is said when loading)
        g.add_argument("--inputs", action="append", metavar="X.npz|DIR|'GLOB'|X.json",
                       help="samples: .npz, directory, quoted glob, Polygraphy JSON"
                            + ("" if self.required else " (optional)"))
        g.add_argument("--data-loader-script", action="append", dest="inputs", type=loader_script,
                       metavar="FILE.py[:FUNC]",
                       help="samples from a Polygraphy data loader (FUNC: load_data)")
        if self.references:
            g.add_argument("--reference", action="append", metavar="R.npz|DIR|'GLOB'|R.json",
                           help="expected outputs, as --inputs (default: FP32 ONNX Runtime)")
        if self.profile:
            # checked with the other flags (model/shapes.profile_of: the one check of the API and manifests too)
            g.add_argument("--max-shapes", default=None, metavar="NAME:AxB,...",
                           help="the deployment's largest shapes (tensorrt's profile)")
            for flag, which in (("--min-shapes", "smallest"), ("--opt-shapes", "most frequent")):
                g.add_argument(flag, default=None, metavar="NAME:AxB,...",
                               help=f"the deployment's {which} shapes (as --max-shapes)")

    @staticmethod
    def check(args) -> None:
        """Samples were given where the command needs them (argparse cannot say: two flags give them)."""
        if getattr(args, "samples_required", False) and not args.inputs:
            raise UsageError(f"the following arguments are required: --inputs (or --data-loader-script) (see "
                             f"'fp16bisect {args.command} --help')")

    @staticmethod
    def profile_of(args) -> dict | None:
        """The deployment profile the shape flags give (None: none), per input (min, opt, max)."""
        from fp16bisect.model import shapes

        return shapes.profile_of(*(getattr(args, k, None) for k in ("min_shapes", "opt_shapes", "max_shapes")))


def loader_script(text: str) -> str:
    path = text.rpartition(":")[0] if ":" in text and text.rpartition(":")[2].isidentifier() else text
    if not path.endswith(".py"):
        raise argparse.ArgumentTypeError(f"{text!r} is not FILE.py or FILE.py:FUNC")
    return text if path != text else f"{text}:load_data"


class ToleranceArgs:
    """Tolerance flags, converted to numbers only: the values check themselves (``Tolerance``), said here with the
    flag's name. With ``default_from``, unset flags take the value recorded there (see ``given``)."""

    def __init__(self, default_from: str = ""):
        self.default_from = default_from

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        g = parser.add_argument_group("judging (per output |a - b| <= atol + rtol*|b|, no new NaN/inf; each "
                                      "[OUTPUT:]VALUE)")
        said = f"default: {self.default_from}, else {{}}" if self.default_from else "default {}"
        for flag, metavar, text in (
                ("--atol", "[OUTPUT:]VALUE", f"absolute tolerance ({said.format(f'{DEFAULT_ATOL:g}')})"),
                ("--rtol", "[OUTPUT:]VALUE", f"relative tolerance ({said.format(f'{DEFAULT_RTOL:g}')})"),
                ("--min-cosine", "[OUTPUT:]VALUE", "also require this cosine similarity"),
                ("--max-mismatch", "[OUTPUT:]VALUE", f"fraction of elements allowed outside it ({said.format(0)})"),
                ("--error-stat", "[OUTPUT:]STAT",
                 f"max|mean|median|pNN of error/allowance <= 1 ({said.format('max')})"),
                ("--argmax", "OUTPUT[:AXIS]", "judge OUTPUT by its argmax along AXIS (default -1)"),
                ("--topk", "OUTPUT:K[:AXIS]", "judge OUTPUT by its top-K indices along AXIS (default -1)")):
            g.add_argument(flag, default=None, action="append", metavar=metavar, help=text)

    @staticmethod
    def given(args) -> GivenTolerance:
        """The tolerance flags given (None: not given), each checked by ``Tolerance``; its message names the flag."""
        with flags_named(*TOLERANCE_FIELDS):
            return GivenTolerance(**{k: getattr(args, k, None) for k in TOLERANCE_FIELDS})

    @staticmethod
    def parse(args, fallback: Tolerance | None = None) -> Tolerance:
        """The flags' tolerance; flags left unset take ``fallback``'s values (default: ``Tolerance()``)."""
        return ToleranceArgs.given(args).over(fallback or Tolerance())


TOLERANCE_FIELDS = ("atol", "rtol", "min_cosine", "max_mismatch", "error_stat", "argmax", "topk")


@contextmanager
def flags_named(*fields: str) -> Iterator[None]:
    """A value's own ``UsageError`` (``atol inf: give ...``, the API's words) as the command line says it
    (``--atol inf: give ...``), for the values made inside: the one place the CLI rephrases a value's check."""
    try:
        yield
    except UsageError as exc:
        message = str(exc)
        name = message.split(" ", 1)[0]
        if name not in fields:
            raise
        raise UsageError(f"--{name.replace('_', '-')}{message[len(name):]}") from None


class BackendArgs:
    """What judges a plan: ``--backend`` and what each backend is made with (``--noise-ok`` is the search's)."""

    @staticmethod
    def add_to(parser: argparse.ArgumentParser) -> None:
        g = parser.add_argument_group("backend")
        g.add_argument("--backend", default="auto", choices=BACKENDS, metavar="NAME",
                       help="emulate | tensorrt | command | auto (default)")
        g.add_argument("--check", default=None, metavar="'CMD'", dest="check_command",
                       help="--backend command: the shell command judging a plan")
        g.add_argument("--keep-plans", action="store_true",
                       help="--backend command: keep each plan's files (*.plans/)")
        g.add_argument("--typing", default="strong", choices=("strong", "weak"),
                       help="tensorrt: strong (default) or weak (10.x: layer pins)")
        g.add_argument("--opt-level", type=int, choices=range(6), default=None, metavar="0-5",
                       help="tensorrt: builder optimisation level (default 3)")
        g.add_argument("--timing-cache", default=None, metavar="FILE",
                       help="tensorrt: timing cache (default: beside -o)")
        g.add_argument("--noise-ok", action="store_true",
                       help="tensorrt: search even if two all-FP16 builds disagree")

    @staticmethod
    def parse(args, plans_dir: str | None = None) -> Options:
        """The backend's options; a flag of one backend given for another is a usage error. ``plans_dir``: where
        the command backend's plan files go (None: beside the search's output)."""
        options = Options.of(opt_level=args.opt_level, timing_cache=args.timing_cache, command=args.check_command,
                             keep_plans=args.keep_plans, typing=args.typing, plans_dir=plans_dir,
                             input_shapes=Samples.profile_of(args))
        check_options(args.backend, options, FLAGS)
        return options


class ParallelArgs:
    """How many plans are evaluated at once, and where."""

    @staticmethod
    def add_to(parser: argparse.ArgumentParser) -> None:
        g = next((g for g in parser._action_groups if g.title == "backend"), None)  # one screen of help
        if g is not None:
            g.title = "backend and parallel evaluation"
        g = g or parser.add_argument_group("parallel evaluation")
        g.add_argument("--jobs", "-j", type=jobs, default=1, metavar="N",
                       help="evaluate up to N plans at once (default 1)")
        g.add_argument("--devices", default=None, metavar="0,1,...",
                       help="GPUs, one worker each (default: the first --jobs GPUs)")
        g.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                       help="evaluate as Ray tasks (pip install 'fp16bisect[ray]')")

    @staticmethod
    def parse(args):
        from fp16bisect.parallel import Parallel, parse_devices

        if args.ray is not None:
            from fp16bisect.parallel.ray import load_ray

            load_ray()  # exit 2 with how to install, before any work
        return Parallel(jobs=args.jobs, devices=parse_devices(args.devices), ray=args.ray)


class OutputArgs:
    """Files a command writes besides what it prints (``output``: how ``-o`` is declared; ``json``, ``csv``: what
    they hold; ``report``: the HTML report), and ``-q``."""

    def __init__(self, *, output: dict | None = None, json: str = "", csv: str = "", report: bool = False,
                 quiet: bool = True):
        self.output, self.json, self.csv, self.report, self.quiet = output, json, csv, report, quiet

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        g = parser.add_argument_group("output")
        if self.output:
            g.add_argument("-o", "--output", **self.output)
        if self.json:
            g.add_argument("--json", metavar="FILE", help=f"also write {self.json} as JSON")
        if self.csv:
            g.add_argument("--csv", metavar="FILE", help=f"write {self.csv} as CSV")
        if self.report:
            g.add_argument("--report", metavar="FILE.html", help="also write a self-contained HTML report")
        if self.quiet:
            g.add_argument("-q", "--quiet", action="store_true", help="no progress output")

    @staticmethod
    def check(args) -> None:
        """Every file the command will write (-o, --json, --csv, --report) is writable: said before the work, not
        after an hour of it."""
        from fp16bisect.artifacts.files import check_writable

        for path in (getattr(args, k, None) for k in ("output", "json", "csv", "report")):
            if path:
                check_writable(path)


def _looks_like_json(path: str) -> bool:
    """An override file, by its name or its first byte (an ONNX model is protobuf: never starts with '{')."""
    if str(path).lower().endswith(".json"):
        return True
    try:
        with open(path, "rb") as f:
            return f.read(64).lstrip()[:1] == b"{"
    except OSError:
        return False


def model_then_overrides(first: str, second: str) -> tuple[str, str]:
    """``apply MODEL OVERRIDES``, the order of every other subcommand (the model first); the order of earlier
    releases, ``apply OVERRIDES MODEL``, still works: when only the first names an override JSON, they swap."""
    if _looks_like_json(first) and not _looks_like_json(second):
        return second, first
    return first, second


def headroom_factor(text: str) -> float | None:
    """``--headroom F``, checked by ``model.headroom.factor`` (the API's and manifests' check too): its
    ``UsageError`` passes through argparse, the same one line."""
    from fp16bisect.model.headroom import factor

    with flags_named("headroom"):
        return factor(text)


def joined(parser: argparse.ArgumentParser, *titles: str):
    """The parser's first group whose title starts with one of ``titles`` (None: none), for flags that join it."""
    return next((g for g in parser._action_groups if (g.title or "").startswith(titles)), None)


class HeadroomArgs:
    """``--headroom F`` (search, check): a tensor whose FP32 peak on any sample exceeds 65504/F counts as an
    overflow (fp16bisect.model.headroom)."""

    def __init__(self, help_text: str):
        self.help = help_text

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        """Into the judging group when the parser has one (``ToleranceArgs``): one screen of help."""
        g = joined(parser, "judging") or parser.add_argument_group("headroom (FP16 keeps |x| <= 65504)")
        g.add_argument("--headroom", type=headroom_factor, default=None, metavar="F", help=self.help)


class PrecisionArgs:
    """``--precision fp16|bf16``: the low precision every plan runs in (``model/precision.py``). ``default=None``
    where an override file may say it (``apply``: the file's precision unless given)."""

    def __init__(self, default: str | None = "fp16"):
        self.default = default

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        from fp16bisect.model.precision import NAMES

        said = "default fp16" if self.default else "default: the override file's, else fp16"
        (joined(parser, "judging") or parser.add_argument_group("precision")).add_argument(
            "--precision", choices=NAMES, default=self.default,
            help=f"fp16 (max 65504) or bf16 (FP32's range), {said}")

    @staticmethod
    def parse(args):
        from fp16bisect.model.precision import precision_of

        return precision_of(getattr(args, "precision", None))


def max_error_value(text: str) -> float | None:
    """``--max-error``, checked by ``diagnose.layerwise.max_error_of`` (the API's check): its ``UsageError`` passes
    through argparse, the same one line."""
    from fp16bisect.diagnose.layerwise import max_error_of

    return max_error_of(text)


def accumulate_value(text: str) -> str:
    """``--accumulate``, checked by ``model.plan_states.accumulation`` (the API's and manifests' check too): its
    ``UsageError`` passes through argparse, the same one line."""
    from fp16bisect.model.plan_states import accumulation

    return accumulation(text)


class AccumulateArgs:
    """``--accumulate fp32|fp16``: what the judge assumes FP16 nodes add in (``model/plan_states.py``).
    ``default=None`` where an override file may say it (``check``: the file's unless given)."""

    def __init__(self, default: str | None = "fp32"):
        self.default = default

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        """Into the ``precision`` group when the parser has one (``PrecisionArgs`` first): one screen of help."""
        said = "default fp32" if self.default else "default: the file's"
        (joined(parser, "judging", "precision") or parser.add_argument_group("precision")).add_argument(
            "--accumulate", type=accumulate_value, default=self.default, metavar="fp32|fp16",
            help=f"fp16: FP16 nodes add in FP16 too ({said})")
