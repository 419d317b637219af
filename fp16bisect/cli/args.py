"""Argument groups, each defined once: its flags, their defaults, and their parsing into a typed value.

A subcommand composes the groups it takes (``main.build_parser``); a command asks each group for its value
(``commands``): ``Samples`` (the model and its sample inputs), ``Fields`` (one option record's flags, generated
from its fields: the tolerance given, ``Judge``, ``Space``, ``Strategy``, ``Journaling``, ``Parallel``),
``OutputArgs`` (files written beside the console output, checked writable before any work; ``-q``).
"""

from __future__ import annotations

import argparse
from dataclasses import Field
from typing import Any

from fp16bisect import records
from fp16bisect.errors import UsageError
from fp16bisect.run.options import CheckOptions, SearchOptions
from fp16bisect.tolerance import GivenTolerance, Tolerance


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
    ``--data-loader-script``, with ``references`` their ``--reference`` outputs). ``args.inputs`` lists every
    source, a data-loader script as ``FILE.py:FUNC`` (``model/sources.py`` reads them)."""

    def __init__(self, title: str = "inputs", *, model: bool = True, required: bool = True,
                 references: bool = True):
        self.title, self.model, self.required, self.references = title, model, required, references

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

    @staticmethod
    def check(args) -> None:
        """Samples were given where the command needs them (argparse cannot say: two flags give them)."""
        if getattr(args, "samples_required", False) and not args.inputs:
            raise UsageError(f"the following arguments are required: --inputs (or --data-loader-script) (see "
                             f"'fp16bisect {args.command} --help')")


def loader_script(text: str) -> str:
    path = text.rpartition(":")[0] if ":" in text and text.rpartition(":")[2].isidentifier() else text
    if not path.endswith(".py"):
        raise argparse.ArgumentTypeError(f"{text!r} is not FILE.py or FILE.py:FUNC")
    return text if path != text else f"{text}:load_data"


TOLERANCE_TITLE = "judging (per output |a - b| <= atol + rtol*|b|, no new NaN/inf; each [OUTPUT:]VALUE)"


class Fields:
    """One option record's flags, generated from its fields (``records.options_of``): a field ``command`` takes is
    the flag ``--`` its name with dashes, with the field's default, its help (the default said from the field's,
    or from ``shown``'s: ``Tolerance()`` for the tolerance given) and its metavar; a switch for a boolean, a
    repeated flag for a tuple. ``parse`` makes the record from the parsed words, and the record's checks say what
    is wrong naming the flag (``--opt-level 9: ...``). The flags go into the group titled ``title`` (joining one
    that is already there); those only ``command`` takes, into the command's own group (``<command> options``)."""

    def __init__(self, record: type, command: str, title: str, *, shown: Any = None):
        self.record, self.command, self.title, self.shown = record, command, title, shown

    def options(self) -> list[tuple[Field, records.Flag]]:
        return list(records.options_of(self.record, self.command))

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        group = None
        for f, spec in self.options():
            if spec.commands == (self.command,):
                target: Any = parser  # its own group, titled '<command> options' (main._help_last)
            else:
                group = group or joined(parser, self.title) or parser.add_argument_group(self.title)
                target = group
            shown = f.default if self.shown is None else getattr(self.shown, f.name)
            target.add_argument(*_names(f.name, spec), dest=f.name, default=f.default,
                                help=spec.help_for(shown, self.command), **_kind(f.default, spec))

    def parse(self, args: argparse.Namespace) -> Any:
        """The record the flags give (each flag not given: the field's default)."""
        names = [f.name for f, _ in self.options()]
        try:
            with records.spelled_as_flags():
                return self.record(**{name: getattr(args, name) for name in names})
        except UsageError as exc:  # a value that is no record's (the tolerance's) names its field: said as the flag
            raise UsageError(records.as_flag(str(exc), names)) from None


def _names(name: str, spec: records.Flag) -> list[str]:
    return ["--" + name.replace("_", "-"), *([spec.short] if spec.short else [])]


def _kind(default: Any, spec: records.Flag) -> dict[str, Any]:
    """How argparse reads the flag: a switch (a boolean field), repeated (a tuple), an optional value (``nargs``
    with ``const``), else one word; the record's check converts the words."""
    if isinstance(default, bool):
        return {"action": argparse.BooleanOptionalAction if default else "store_true"}
    kind: dict[str, Any] = {"metavar": spec.metavar}
    if spec.repeat:
        kind["action"] = _Repeated
    if spec.nargs is not None:
        kind.update(nargs=spec.nargs, const=spec.const)
    return kind


class _Repeated(argparse.Action):
    """A flag given several times: a tuple of its values (argparse's ``append`` cannot add to a tuple default)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, (*(getattr(namespace, self.dest) or ()), values))


def tolerance_group(command: str) -> Fields:
    """The tolerance's flags (``GivenTolerance``'s fields), each default said as ``Tolerance``'s."""
    return Fields(GivenTolerance, command, TOLERANCE_TITLE, shown=Tolerance())


def option_groups(options: type[SearchOptions] | type[CheckOptions], command: str) -> dict[str, Fields]:
    """The groups of ``options``' parts: the tolerance's and each record's (``RECORDS``), by the part's name; the
    plan space joins the tolerance's group, parallel evaluation the backend's."""
    backend = "backend and parallel evaluation"
    titles = {"space": "judging", "judge": backend, "parallel": backend}  # the rest: only a search's flags
    groups = {"tolerance": tolerance_group(command)}
    groups.update({name: Fields(record, command, titles.get(name, f"{command} options"))
                   for name, record in options.RECORDS.items()})
    return groups


def parsed(groups: dict[str, Fields], args: argparse.Namespace) -> dict[str, Any]:
    """Each group's value, by its part's name: what ``SearchOptions``/``CheckOptions`` and the API take."""
    return {name: group.parse(args) for name, group in groups.items()}


class OutputArgs:
    """Files a command writes besides what it prints (``output``: how ``-o`` is declared; ``json``, ``csv``: what
    they hold; ``report``: the HTML report), and ``-q``; in the inputs' group when the command has one."""

    def __init__(self, *, output: dict | None = None, json: str = "", csv: str = "", report: bool = False,
                 quiet: bool = True):
        self.output, self.json, self.csv, self.report, self.quiet = output, json, csv, report, quiet

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        g = joined(parser, "inputs")  # what goes in and what comes out, one group: one screen of help
        if g is not None:
            g.title = "inputs and output"
        g = g or parser.add_argument_group("output")
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


def joined(parser: argparse.ArgumentParser, *titles: str):
    """The parser's first group whose title starts with one of ``titles`` (None: none), for flags that join it."""
    return next((g for g in parser._action_groups if (g.title or "").startswith(titles)), None)

