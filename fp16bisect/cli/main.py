"""Command line entry point: the parser built from the argument groups, dispatch, and exit codes.

Exit codes: 0 done; 1 a check failed; 2 bad input or usage; 3 tolerance unreachable even in FP32; 4 an
internal error (one line, the traceback in a file it names); 5 a search's budget ended it (the smallest set seen to
pass written: rerun to continue); 130 interrupted (a search then writes the smallest set seen to pass too).
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import textwrap
from pathlib import PurePath

from rich_argparse import RawDescriptionRichHelpFormatter

from fp16bisect import __version__
from fp16bisect.cli.args import Fields, OutputArgs, Samples, jobs, option_groups, tolerance_group
from fp16bisect.cli.commands import COMMANDS, INTERRUPTED
from fp16bisect.cli.stdout import reader_may_leave
from fp16bisect.errors import Error, UsageError
from fp16bisect.model import npz, weights
from fp16bisect.model.precision import BF16, FP16
from fp16bisect.records import APPLY, CHECK, COMPARE, MIGRATE, SCAN, SEARCH
from fp16bisect.run.options import CheckOptions, SearchOptions, Space

INTERNAL_ERROR = Error.exit_code  # a bug of ours: one line, the traceback in a file it names


class _Parser(argparse.ArgumentParser):
    def parse_args(self, args=None, namespace=None):
        self._argv = list(sys.argv[1:] if args is None else args)  # for the hint on an expanded glob
        return super().parse_args(args, namespace)

    def error(self, message: str):  # one line, exit 2 (argparse prints usage too)
        raise UsageError(expanded_glob(getattr(self, "_argv", []), message) or f"{message} (see '{self.prog} --help')")


SAMPLE_FLAGS = ("--inputs", "--reference")  # flags whose value an unquoted glob turns into several words


def expanded_glob(argv: list[str], message: str) -> str | None:
    """The one-line hint for ``--inputs data/*.npz`` unquoted: the shell passes every file, argparse takes the first
    as the value and calls the others unrecognized. None when the unrecognized words are not such files (the same
    suffix as the flag's value, right after it)."""
    if not message.startswith("unrecognized arguments: "):
        return None
    extra = set(message.removeprefix("unrecognized arguments: ").split())
    for k, word in enumerate(argv):
        flag, _, value = word.partition("=")
        if flag not in SAMPLE_FLAGS:
            continue
        values = [value] if value else []
        values += itertools.takewhile(lambda w: not w.startswith("-"), argv[k + 1:])
        if not values:
            continue
        suffix = PurePath(values[0]).suffix
        files = [values[0], *itertools.takewhile(lambda w: PurePath(w).suffix == suffix, values[1:])]
        if suffix and len(files) > 1 and set(files[1:]) <= extra:
            parents = {str(PurePath(f).parent) for f in files}
            folder = parents.pop() if len(parents) == 1 else "DIR"
            pattern = f"'{PurePath(folder, '*' + suffix).as_posix()}'"
            return (f"{flag} got {len(files)} files ({files[0]} {files[1]}{' ...' if len(files) > 2 else ''}): the "
                    f"shell expanded an unquoted glob; quote it ({flag} {pattern}) or pass the directory "
                    f"({flag} {folder})")
    return None


class _Removed(argparse.Action):
    """A flag that was removed: exit 2 with a one-line hint instead of an unknown-argument error."""

    def __call__(self, parser, namespace, values, option_string=None):
        raise UsageError(f"{option_string} was removed: every search now evaluates each 'set minus one node' of its "
                         "answer directly, so the flag did nothing; drop it")


class _Formatter(RawDescriptionRichHelpFormatter):
    """--help through rich (as the tables are): colours on a terminal, plain text in a pipe or a log; the
    description and the example keep their line breaks; group titles as written."""

    group_name_formatter = str
    help_markup = text_markup = False  # help is plain text: "pip install 'fp16bisect[ray]'" must keep its [ray]

    def __init__(self, prog: str, **kwargs):
        # one line a flag on a terminal of 100 columns or more: the helps start at column 39, after the longest
        # flag with its value (--data-loader-script FILE.py[:FUNC]); narrower, argparse's column 24
        kwargs.setdefault("max_help_position", 39 if _columns() >= 100 else 24)
        super().__init__(prog, **kwargs)


def _columns() -> int:
    import shutil

    return shutil.get_terminal_size().columns  # $COLUMNS first, as argparse's width


def _compose(parser: argparse.ArgumentParser, *groups) -> argparse.ArgumentParser:
    for group in groups:
        group.add_to(parser)
    return parser


DOCS = "docs/commands/{}.md"  # each command's page: every flag in detail (--help gives each one line)


def _command(sub, name: str, summary: str, usage: str, description: str, *examples: str) -> argparse.ArgumentParser:
    """A subcommand: its one-line summary (in 'fp16bisect --help'), usage with the model first, what it does and
    where its page is, and examples (its -h comes last, see ``_help_last``)."""
    shown = "\n".join(f"  $ {e}" for e in examples)
    description = f"{textwrap.fill(description, 78)}\nEvery flag in detail: {DOCS.format(name)}"
    return sub.add_parser(name, help=summary, usage=f"%(prog)s {usage}", description=description,
                          epilog=f"example{'s' if len(examples) > 1 else ''}:\n{shown}", add_help=False,
                          formatter_class=_Formatter)


def _help_last(name: str, parser: argparse.ArgumentParser) -> None:
    """The groups in the order they were composed (the model and --inputs first), then the command's own flags,
    -h/--help last among them (no group of its own: one screen of help)."""
    own = parser._optionals  # argparse's default group: the flags the command adds itself
    own.add_argument("-h", "--help", action="help", help="show this help and exit")
    own.title = f"{name} options"
    groups = [g for g in parser._action_groups if g not in (parser._positionals, own)]
    parser._action_groups[:] = [*groups, own]


def _search(sub) -> None:
    s = _compose(_command(sub, "search", "search the smallest set of nodes to keep in FP32, write the override JSON",
                          "MODEL --inputs X.npz [--inputs ...] [-o overrides.json] [options]",
                          "Finds the fewest nodes to keep in FP32 to meet the tolerance; writes -o.",
                          "fp16bisect search model.onnx --inputs x.npz -o overrides.json",
                          "fp16bisect search model.onnx --inputs a.npz --inputs b.npz --atol 0.05 --report search.html"),
                 # the most used first: what is searched, where it goes, the tolerance; then how it runs (the
                 # options records' flags, generated from their fields: cli/args.py's Fields)
                 Samples(),
                 OutputArgs(output=dict(default="overrides.json", metavar="FILE",
                                        help="the override JSON (default overrides.json)"),
                            report=True),
                 *option_groups(SearchOptions, SEARCH).values())
    s.add_argument("--check-minimal", action=_Removed, nargs=0, help=argparse.SUPPRESS,
                   default=None)  # removed in 0.x: exit 2 with a hint, for one release


def _check(sub) -> None:
    c = _compose(_command(sub, "check", "pre-flight: does the model meet the tolerance in FP16 (with overrides)? "
                                        "exit 0 yes, 1 no",
                          "MODEL --inputs X.npz [--overrides O.json] [options]",
                          "Runs the model in FP16 (keeping the nodes of --overrides in FP32) on the samples and "
                          "compares every output with FP32: exit 0 when all meet the tolerance, 1 when one does not "
                          "(a CI gate), 3 when even FP32 misses it.",
                          "fp16bisect check model.onnx --inputs x.npz --overrides overrides.json --json check.json"),
                 Samples(), *option_groups(CheckOptions, CHECK).values(), OutputArgs(json="the result", report=True))
    c.add_argument("--overrides", metavar="O.json", help="keep the nodes of this override file in FP32")


def _batch(sub) -> None:
    b = _command(sub, "batch", "check or search many models listed in a manifest (TOML or JSON), in parallel; exit "
                               "0 when every entry passes, 1 when any fails",
                 "MANIFEST [-j N] [--json FILE] [options]",
                 "Runs each entry of the manifest (model, inputs, references, tolerance, action check or search) and "
                 "prints one row per entry; a search entry writes its override JSON to its 'output', else "
                 "beside the manifest as <name>.overrides.json.",
                 "fp16bisect batch models.toml -j 4 --json batch.json")
    b.add_argument_group("manifest").add_argument(
        "manifest", metavar="MANIFEST", help="the manifest: entries with model, inputs, references, tolerance, action")
    _compose(b, OutputArgs(json="every entry's result"))
    b.add_argument("--jobs", "-j", type=jobs, default=2, metavar="N", help="entries run at once (default 2)")
    b.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run the entries as Ray tasks (on the cluster at ADDRESS, or a local Ray instance)")


def _scan(sub) -> None:
    n = _compose(_command(sub, "scan", "FP32 run only: rank the tensors and weights FP16 would overflow or flush "
                                       "(seconds; no search)",
                          "MODEL --inputs X.npz [--top N] [options]",
                          "Runs the model once in FP32 and ranks the tensors and weights by how close they come to "
                          "FP16's limits (|x| > 65504 overflows, |x| < 6e-08 flushes to 0), the suspects the search "
                          "tries first.",
                          "fp16bisect scan model.onnx --inputs x.npz --top 10"),
                 Samples(references=False), Fields(Space, SCAN, "precision"), OutputArgs(json="the ranking"))
    n.add_argument("--top", type=int, default=20, metavar="N", help="rows to print per table (default 20)")


def _compare(sub) -> None:
    m = _compose(_command(sub, "compare", "layer-wise: each node's output in FP16 against FP32, in topological "
                                          "order; names the first failing node",
                          "MODEL --inputs X.npz [--overrides O.json] [options]",
                          "Compares every node's output in FP16 with FP32 and names the first node that fails "
                          "(where the error is born); --atol/--rtol also judge the model's outputs.",
                          "fp16bisect compare model.onnx --inputs x.npz --csv nodes.csv"),
                 Samples(), tolerance_group(COMPARE), Fields(Space, COMPARE, "judging"),
                 OutputArgs(csv="every node's row", report=True))
    m.add_argument("--overrides", metavar="O.json", help="keep the nodes of this override file in FP32")
    t = m.add_argument_group("layer-wise failure rule (a node fails on inf/NaN where FP32 is finite, or on a "
                             "large error for its own scale)")
    t.add_argument("--max-error", default=None, metavar="FRACTION",
                   help="fail when a tensor's max abs error exceeds this fraction of its max |FP32 value| "
                        f"(default: 256 unit roundoffs of --precision, {FP16.max_error:g} for FP16, "
                        f"{BF16.max_error:g} for BF16)")


def _apply(sub) -> None:
    a = _command(sub, "apply", "write the mixed-precision ONNX an override file describes (for strongly typed "
                               "builds: TensorRT 11, TensorRT-RTX)",
                 "MODEL OVERRIDES -o MIXED.onnx [--verify --inputs X.npz] [options]",
                 "Writes the model with the override file's nodes in FP32 and every other candidate in FP16 (Casts at "
                 "the boundaries), the file a strongly typed TensorRT build takes; --verify runs it on the samples. "
                 "The model comes first, as in every command (OVERRIDES MODEL, the order of earlier releases, works "
                 "too).",
                 "fp16bisect apply model.onnx overrides.json -o model.mixed.onnx --verify --inputs x.npz",
                 "trtexec --onnx=model.mixed.onnx --stronglyTyped")
    g = a.add_argument_group("model and overrides")
    g.add_argument("model", metavar="MODEL", help="the FP32 ONNX model the overrides were searched on")
    g.add_argument("overrides", metavar="OVERRIDES", help="the override JSON written by 'fp16bisect search'")
    _mixed_model(a, tolerance_group(APPLY))
    _compose(a, Fields(Space, APPLY, "judging"))
    a.add_argument("--force", action="store_true", help="apply even if the override file was made for another model")
    a.add_argument("--keep-fp32", action="append", default=[], metavar="NODE",
                   help="also keep this node (fp16bisect node id) in FP32; repeat for several")


def _mixed_model(parser, tolerance: Fields) -> None:
    """What ``apply`` and ``migrate`` share: where the mixed model goes, its I/O types, and --verify's samples."""
    _compose(parser, OutputArgs(output=dict(required=True, metavar="MIXED.onnx",
                                            help="where to write the mixed model")),
             Samples("samples for --verify", model=False, required=False), tolerance)
    parser.add_argument("--fp16-io", action="store_true",
                        help="make float graph inputs and outputs FP16 (default FP32)")
    parser.add_argument("--verify", nargs="?", const="storage", choices=("storage", "strict"), default=None,
                        help="run the written model on --inputs (FP16 storage, FP32 compute) against the references; "
                             "'strict' also runs the file in onnx.reference (FP16 outputs, sums in FP32: a second opinion)")


def _migrate(sub) -> None:
    g = _command(sub, "migrate", "turn TensorRT 10 FP32 layer pins (trtexec --layerPrecisions) into the strongly "
                                 "typed mixed-precision ONNX TensorRT 11 builds",
                 "MODEL (--trtexec-args 'ARGS' | --layer-precisions FILE) -o MIXED.onnx [options]",
                 "Maps the FP32 layer pins of a TensorRT 10 build (trtexec's --layerPrecisions, or Polygraphy's "
                 "--layer-precisions list) back to the model's nodes, writes them as an override JSON and writes the "
                 "mixed-precision model a strongly typed build (TensorRT 11, RTX) takes.",
                 "fp16bisect migrate model.onnx --trtexec-args '--fp16 --layerPrecisions=a:fp32,b:fp32' "
                 "-o model.mixed.onnx")
    g.add_argument_group("model").add_argument("model", metavar="MODEL",
                                               help="the FP32 ONNX model the pins were made for")
    pins = g.add_mutually_exclusive_group(required=True)
    pins.add_argument("--trtexec-args", metavar="'ARGS'",
                      help="the TensorRT 10 trtexec arguments, e.g. '--fp16 --layerPrecisions=a:fp32,b:fp32'")
    pins.add_argument("--layer-precisions", metavar="FILE",
                      help="LAYER:PRECISION entries, one a line or blank-separated (Polygraphy's --layer-precisions)")
    g.add_argument("--overrides-out", metavar="O.json", default=None,
                   help="where the override JSON goes (default: beside -o, MIXED.overrides.json)")
    _mixed_model(g, tolerance_group(MIGRATE))


def _kernels(sub) -> None:
    k = _command(sub, "kernels", "build the answer's file and the all-FP16 file with TensorRT (TensorRT-RTX: on a "
                                 "CPU) and show the kernel each pin landed in",
                 "MODEL OVERRIDES [--json FILE] [--report FILE.html] [options]",
                 "Builds the mixed-precision file of the override file's answer (what apply writes) and the all-FP16 "
                 "file, and says for each FP32 pin and FP32-accumulation node the engine kernel it landed in, the "
                 "nodes that kernel covers, the types it reads and writes, whether the node's output is stored or "
                 "internal; pins the all-FP16 engine removes (moot), kernels a pin splits, and TensorRT's warnings "
                 "that name nodes. Builds, never runs: no verdict changes.",
                 "fp16bisect kernels model.onnx overrides.json --report kernels.html")
    g = k.add_argument_group("model and overrides")
    g.add_argument("model", metavar="MODEL", help="the FP32 ONNX model the overrides were searched on")
    g.add_argument("overrides", metavar="OVERRIDES", help="the override JSON written by 'fp16bisect search'")
    for flag, which in (("--min-shapes", "smallest"), ("--opt-shapes", "tuned-for"), ("--max-shapes", "largest")):
        g.add_argument(flag, default=None, metavar="NAME:AxB,...",
                       help=f"the {which} input shapes to build for (default: the override file's)")
    _compose(k, OutputArgs(json="the kernel plan", report=True))
    k.add_argument("--fp16-io", action="store_true", help="FP16 graph inputs and outputs in both files (as apply's)")
    k.add_argument("--force", action="store_true", help="use an override file made for another model version")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fp16bisect", formatter_class=_Formatter,
                     description="Find the ONNX nodes an FP16 build must keep in FP32.",
                     epilog="example:\n  $ fp16bisect search model.onnx --inputs x.npz -o overrides.json\n"
                            "  $ fp16bisect apply model.onnx overrides.json -o model.mixed.onnx --verify --inputs x.npz"
                            "\n\n'fp16bisect COMMAND --help' describes each command.")
    parser.add_argument("--version", action="version", version=f"fp16bisect {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for add in (_search, _check, _batch, _scan, _compare, _apply, _migrate, _kernels):
        add(sub)
    for name, command in sub.choices.items():
        _help_last(name, command)
    return parser


def _traceback_file() -> str:
    """Writes the exception being handled, with its traceback, to a new file in the temporary directory."""
    import tempfile
    import time
    import traceback

    with tempfile.NamedTemporaryFile("w", prefix=f"fp16bisect-traceback-{time.strftime('%Y%m%d-%H%M%S')}-",
                                     suffix=".txt", delete=False) as f:
        f.write(f"fp16bisect {__version__}, Python {sys.version.split()[0]}, argv: {sys.argv}\n\n")
        traceback.print_exc(file=f)
    return f.name


def main(argv: list[str] | None = None) -> int:
    with reader_may_leave():  # `fp16bisect search ... | head -1`: the command's own exit code all the same
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    debug = bool(os.environ.get("FP16BISECT_DEBUG"))
    weights.return_freed_memory()
    stores = weights.alive()
    try:
        args = build_parser().parse_args(argv)
        if args.command is None:
            raise UsageError("no command given: try 'fp16bisect search MODEL --inputs X.npz'")
        Samples.check(args)
        return COMMANDS[args.command](args)
    except Error as exc:  # each says what is wrong in one line, and carries its exit code
        if debug:
            raise
        print(f"fp16bisect: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("fp16bisect: interrupted", file=sys.stderr)
        return INTERRUPTED
    except MemoryError:
        print("fp16bisect: error: out of memory: use fewer or smaller samples", file=sys.stderr)
        return UsageError.exit_code
    except Exception as exc:  # a bug of ours: one line here, the traceback in a file it names
        if debug:
            raise
        where = _traceback_file()
        print(f"fp16bisect: internal error: {type(exc).__name__}: {exc}; the traceback is in {where}: please "
              "report it with that file", file=sys.stderr)
        return INTERNAL_ERROR
    finally:
        weights.close_since(stores)  # the work directories of the models this command loaded
        npz.forget()  # the last sample files read: their arrays are not used any more


if __name__ == "__main__":
    sys.exit(main())
