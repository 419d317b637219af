"""Command line: argument parsing and exit codes only.

Exit codes: 0 done; 1 a check failed, or an internal error; 2 bad input or
usage; 3 tolerance unreachable even in FP32; 130 interrupted.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

from . import __version__
from .errors import ToleranceUnreachable, UsageError
from .tolerance import DEFAULT_ATOL, DEFAULT_RTOL, Tolerance


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse prints usage too)
        raise UsageError(f"{message} (see '{self.prog} --help')")


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def _nonnegative(text: str) -> float:
    value = _number(text)
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0")
    return value


def _cosine(text: str) -> float:
    value = _number(text)
    if not -1 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be a cosine similarity from -1 to 1")
    return value


def add_input_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("inputs")
    g.add_argument("model", help="the ONNX model (FP32)")
    g.add_argument("--inputs", action="append", required=True, metavar="X.npz",
                   help="one sample: an .npz with one array per model input; repeat for several samples")
    g.add_argument("--reference", action="append", metavar="R.npz",
                   help="expected outputs for the matching --inputs (default: an FP32 ONNX Runtime run)")


def add_tolerance_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("tolerance (per output: |a - b| <= atol + rtol*|b|, no new NaN/inf)")
    g.add_argument("--atol", type=_nonnegative, default=DEFAULT_ATOL, help=f"absolute tolerance (default {DEFAULT_ATOL:g})")
    g.add_argument("--rtol", type=_nonnegative, default=DEFAULT_RTOL, help=f"relative tolerance (default {DEFAULT_RTOL:g})")
    g.add_argument("--min-cosine", type=_cosine, default=None, help="also require this cosine similarity per output")
    g.add_argument("--max-mismatch", type=_nonnegative, default=0.0,
                   help="fraction of elements allowed outside atol + rtol*|b| (default 0)")


def add_backend_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("backend")
    g.add_argument("--backend", default="auto", choices=("auto", "emulate", "tensorrt"),
                   help="emulate: FP16 emulated on ONNX Runtime CPU; tensorrt: real engines (not in this version); "
                        "auto: emulate (default)")


def tolerance_from(args) -> Tolerance:
    if args.max_mismatch > 1:
        raise UsageError(f"--max-mismatch {args.max_mismatch:g} is a fraction: give a number from 0 to 1")
    return Tolerance(args.atol, args.rtol, args.min_cosine, args.max_mismatch)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fp16bisect", description="Find the ONNX nodes an FP16 build must keep in FP32.")
    parser.add_argument("--version", action="version", version=f"fp16bisect {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    s = sub.add_parser("search", help="search the smallest set of nodes to keep in FP32, write the override JSON")
    add_input_args(s)
    add_tolerance_args(s)
    add_backend_args(s)
    s.add_argument("-o", "--output", default="overrides.json", metavar="FILE",
                   help="where to write the override JSON (default overrides.json)")
    s.add_argument("--check-minimal", action="store_true",
                   help="evaluate each 'set minus one node' directly instead of relying on monotonicity")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    return parser


def cmd_search(args) -> int:
    from .overrides import check_writable, write_json
    from .pipeline import search_model
    from .report import ConsoleListener, print_summary

    tolerance = tolerance_from(args)
    check_writable(args.output)  # before the search, not after an hour of it
    listener = ConsoleListener(quiet=args.quiet)
    if not args.quiet:
        listener.stage(f"tolerance: {tolerance}")
    try:
        outcome = search_model(args.model, args.inputs, args.reference, tolerance, args.backend,
                               check_minimal=args.check_minimal, listener=listener)
    finally:
        listener.close()
    write_json(args.output, outcome.data)
    print_summary(outcome, args.output)
    return 0


def main(argv: list[str] | None = None) -> int:
    debug = bool(os.environ.get("FP16BISECT_DEBUG"))
    try:
        args = build_parser().parse_args(argv)
        if args.command is None:
            raise UsageError("no command given: try 'fp16bisect search MODEL --inputs X.npz'")
        return {"search": cmd_search}[args.command](args)
    except (UsageError, ToleranceUnreachable) as exc:
        if debug:
            raise
        print(f"fp16bisect: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("fp16bisect: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print("fp16bisect: error: out of memory: use fewer or smaller samples", file=sys.stderr)
        return 1
    except Exception as exc:  # a bug of ours: one line, the traceback on request
        if debug:
            raise
        print(
            f"fp16bisect: internal error: {type(exc).__name__}: {exc}; rerun with FP16BISECT_DEBUG=1 "
            "for the traceback and report it",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
