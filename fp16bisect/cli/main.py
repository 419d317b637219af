"""Command line entry point: the parser built from the argument groups, dispatch, and exit codes.

Exit codes: 0 done; 1 a check failed; 2 bad input or usage; 3 tolerance unreachable even in FP32; 4 an
internal error (one line, the traceback in a file it names); 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys

from fp16bisect import __version__
from fp16bisect.cli.args import BackendArgs, OutputArgs, ParallelArgs, Samples, ToleranceArgs, jobs, nonnegative
from fp16bisect.cli.commands import COMMANDS, INTERRUPTED
from fp16bisect.errors import Error, UsageError
from fp16bisect.model import weights
from fp16bisect.strategy.prior_choice import CHOICES

INTERNAL_ERROR = Error.exit_code  # a bug of ours: one line, the traceback in a file it names


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse prints usage too)
        raise UsageError(f"{message} (see '{self.prog} --help')")


class _Removed(argparse.Action):
    """A flag that was removed: exit 2 with a one-line hint instead of an unknown-argument error."""

    def __call__(self, parser, namespace, values, option_string=None):
        raise UsageError(f"{option_string} was removed: every search now evaluates each 'set minus one node' of its "
                         "answer directly, so the flag did nothing; drop it")


def _compose(parser: argparse.ArgumentParser, *groups) -> argparse.ArgumentParser:
    for group in groups:
        group.add_to(parser)
    return parser


def _search(sub) -> None:
    s = _compose(sub.add_parser("search", help="search the smallest set of nodes to keep in FP32, write the "
                                                "override JSON"),
                 Samples(), ToleranceArgs(), BackendArgs(), ParallelArgs(),
                 OutputArgs(output=dict(default="overrides.json", metavar="FILE",
                                        help="where to write the override JSON (default overrides.json)"),
                            report=True))
    s.add_argument("--check-minimal", action=_Removed, nargs=0, help=argparse.SUPPRESS,
                   default=None)  # removed in 0.x: exit 2 with a hint, for one release
    s.add_argument("--repeats", type=int, default=1, metavar="N",
                   help="evaluate each plan N times (on TensorRT: N builds); all must pass (default 1)")
    s.add_argument("--prior", choices=CHOICES, default="auto",
                   help="emulate: search on the emulator (CPU) first, then certify its set on --backend (k+2 "
                        "evaluations there when they agree) or continue from it; none: search on --backend "
                        "alone; auto (default): emulate whenever --backend is not emulate and the model runs on "
                        "ONNX Runtime CPU")
    s.add_argument("--restart", action="store_true",
                   help="discard the journal of an earlier run of this search instead of resuming it")
    s.add_argument("--retry-crashed", action="store_true",
                   help="when resuming, evaluate again the plans an earlier run died evaluating (a crash or a kill; "
                        "by default they count as could-not-evaluate, so a plan that crashes the build is not "
                        "retried forever)")


def _check(sub) -> None:
    c = _compose(sub.add_parser("check", help="pre-flight: does the model meet the tolerance in FP16 (with "
                                              "overrides)? exit 0 yes, 1 no"),
                 Samples(), ToleranceArgs(), BackendArgs(), OutputArgs(json="the result", report=True),
                 ParallelArgs())
    c.add_argument("--overrides", metavar="O.json", help="keep the nodes of this override file in FP32")


def _batch(sub) -> None:
    b = _compose(sub.add_parser("batch", help="check or search many models listed in a manifest (TOML or JSON), "
                                              "in parallel; exit 0 when every entry passes, 1 when any fails"),
                 OutputArgs(json="every entry's result", quiet=False))
    b.add_argument("manifest", help="the manifest: entries with model, inputs, references, tolerance, action")
    b.add_argument("--jobs", "-j", type=jobs, default=2, metavar="N", help="entries run at once (default 2)")
    b.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run the entries as Ray tasks (on the cluster at ADDRESS, or a local Ray instance)")


def _scan(sub) -> None:
    n = _compose(sub.add_parser("scan", help="FP32 run only: rank the tensors and weights FP16 would overflow or "
                                             "flush (seconds; no search)"),
                 Samples(references=False), OutputArgs(json="the ranking"))
    n.add_argument("--top", type=int, default=20, metavar="N", help="rows to print per table (default 20)")


def _compare(sub) -> None:
    m = _compose(sub.add_parser("compare", help="layer-wise: each node's output in FP16 against FP32, in "
                                                "topological order; names the first failing node"),
                 Samples(), ToleranceArgs(), OutputArgs(csv="every node's row", report=True))
    m.add_argument("--overrides", metavar="O.json", help="keep the nodes of this override file in FP32")
    t = m.add_argument_group("layer-wise failure rule (a node fails on inf/NaN where FP32 is finite, or on a "
                             "large error for its own scale)")
    t.add_argument("--max-error", type=nonnegative, default=None, metavar="FRACTION",
                   help="fail when a tensor's max abs error exceeds this fraction of its max |FP32 value| "
                        "(default 0.125: 256 x FP16's unit roundoff 2^-11)")


def _apply(sub) -> None:
    a = sub.add_parser("apply", help="write the mixed-precision ONNX an override file describes "
                                     "(for strongly typed builds: TensorRT 11, TensorRT-RTX)")
    a.add_argument("overrides", help="the override JSON written by 'fp16bisect search'")
    a.add_argument("model", help="the FP32 ONNX model the overrides were searched on")
    a.add_argument("--fp16-io", action="store_true", help="make float graph inputs and outputs FP16 (default FP32)")
    a.add_argument("--force", action="store_true", help="apply even if the override file was made for another model")
    a.add_argument("--keep-fp32", action="append", default=[], metavar="NODE",
                   help="also keep this node (fp16bisect node id) in FP32; repeat for several")
    a.add_argument("--verify", nargs="?", const="storage", choices=("storage", "strict"), default=None,
                   help="run the written model on --inputs (FP16 storage, FP32 compute) against the references; "
                        "'strict' also runs onnx.reference in FP16 arithmetic (a pessimistic bound)")
    _compose(a, OutputArgs(output=dict(required=True, metavar="MIXED.onnx", help="where to write the mixed model")),
             Samples("samples for --verify", model=False, required=False),
             ToleranceArgs(default_from="the override file's"))


def _migrate(sub) -> None:
    g = sub.add_parser("migrate", help="turn TensorRT 10 FP32 layer pins (trtexec --layerPrecisions) into the "
                                       "strongly typed mixed-precision ONNX TensorRT 11 builds")
    g.add_argument("model", help="the FP32 ONNX model the pins were made for")
    pins = g.add_mutually_exclusive_group(required=True)
    pins.add_argument("--trtexec-args", metavar="'ARGS'",
                      help="the TensorRT 10 trtexec arguments, e.g. '--fp16 --layerPrecisions=a:fp32,b:fp32'")
    pins.add_argument("--layer-precisions", metavar="FILE",
                      help="LAYER:PRECISION entries, one a line or blank-separated (Polygraphy's --layer-precisions)")
    g.add_argument("--overrides-out", metavar="O.json", default=None,
                   help="where the override JSON goes (default: beside -o, MIXED.overrides.json)")
    g.add_argument("--fp16-io", action="store_true", help="make float graph inputs and outputs FP16 (default FP32)")
    g.add_argument("--verify", nargs="?", const="storage", choices=("storage", "strict"), default=None,
                   help="run the written model on --inputs against the references, as 'apply --verify' does")
    _compose(g, OutputArgs(output=dict(required=True, metavar="MIXED.onnx", help="where to write the mixed model")),
             Samples("samples for --verify", model=False, required=False), ToleranceArgs())


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fp16bisect", description="Find the ONNX nodes an FP16 build must keep in FP32.")
    parser.add_argument("--version", action="version", version=f"fp16bisect {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for add in (_search, _check, _batch, _scan, _compare, _apply, _migrate):
        add(sub)
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
    debug = bool(os.environ.get("FP16BISECT_DEBUG"))
    weights.return_freed_memory()
    stores = weights.alive()
    try:
        args = build_parser().parse_args(argv)
        if args.command is None:
            raise UsageError("no command given: try 'fp16bisect search MODEL --inputs X.npz'")
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


if __name__ == "__main__":
    sys.exit(main())
