"""Command line: argument parsing and exit codes only.

Exit codes: 0 done; 1 a check failed, or an internal error; 2 bad input or
usage; 3 tolerance unreachable even in FP32; 130 interrupted.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

from fp16bisect import __version__
from fp16bisect.model import weights
from fp16bisect.errors import ToleranceUnreachable, UsageError
from fp16bisect.tolerance import DEFAULT_ATOL, DEFAULT_RTOL, Tolerance


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse prints usage too)
        raise UsageError(f"{message} (see '{self.prog} --help')")


class _Removed(argparse.Action):
    """A flag that was removed: exit 2 with a one-line hint instead of an unknown-argument error."""

    def __call__(self, parser, namespace, values, option_string=None):
        raise UsageError(f"{option_string} was removed: every search now evaluates each 'set minus one node' of its "
                         "answer directly, so the flag did nothing; drop it")


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


def add_tolerance_args(p: argparse.ArgumentParser, default_from: str = "") -> None:
    """Tolerance flags; with ``default_from``, unset flags take the value recorded there (see tolerance_from)."""
    g = p.add_argument_group("tolerance (per output: |a - b| <= atol + rtol*|b|, no new NaN/inf)")
    dflt = (lambda value: None) if default_from else (lambda value: value)
    said = f"default: {default_from}" if default_from else "default {}"
    g.add_argument("--atol", type=_nonnegative, default=dflt(DEFAULT_ATOL),
                   help=f"absolute tolerance ({said.format(f'{DEFAULT_ATOL:g}')})")
    g.add_argument("--rtol", type=_nonnegative, default=dflt(DEFAULT_RTOL),
                   help=f"relative tolerance ({said.format(f'{DEFAULT_RTOL:g}')})")
    g.add_argument("--min-cosine", type=_cosine, default=None, help="also require this cosine similarity per output")
    g.add_argument("--max-mismatch", type=_nonnegative, default=dflt(0.0),
                   help=f"fraction of elements allowed outside atol + rtol*|b| ({said.format(0)})")


def add_backend_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("backend")
    g.add_argument("--backend", default="auto", choices=("auto", "emulate", "tensorrt", "command"),
                   help="emulate: FP16 emulated on ONNX Runtime CPU; tensorrt: real engine builds of each plan's "
                        "mixed-precision ONNX, strongly typed (needs an NVIDIA GPU); "
                        "command: your own command judges each plan (--check); "
                        "auto (default): tensorrt when TensorRT, Polygraphy and a GPU are present, else emulate")
    g.add_argument("--check", default=None, metavar="'CMD'", dest="check_command",
                   help="with --backend command: the shell command that judges a plan, run once per plan with "
                        "{model} (the plan's mixed-precision ONNX), {overrides} (the plan as an override JSON), "
                        "{original}, {inputs} (sample_<i>.npz) and {outputs} (write sample_<i>.npz there to have "
                        "them compared) replaced by quoted paths; exit 0 pass, 1-127 fail, 125 cannot evaluate, "
                        "other codes abort (as git bisect run)")
    g.add_argument("--keep-plans", action="store_true",
                   help="with --backend command: keep each plan's files (model, overrides, inputs, outputs, "
                        "stdout/stderr) under <output>.plans/ instead of removing them after each evaluation")
    g.add_argument("--typing", default="strong", choices=("strong", "weak"),
                   help="tensorrt: strong (default) builds each plan's mixed-precision ONNX strongly typed "
                        "(TensorRT 9.0+, so every 10.x, 11.x, RTX); weak (TensorRT 10.x only) builds the original "
                        "model with FP16 and FP32 layer precisions, and checks each engine for pins TensorRT ignored")
    g.add_argument("--opt-level", type=int, choices=range(6), default=None, metavar="0-5",
                   help="TensorRT builder optimisation level for search builds (lower builds faster; default "
                        "TensorRT's, 3)")
    g.add_argument("--timing-cache", default=None, metavar="FILE",
                   help="TensorRT timing cache shared by every build (default: beside -o, *.timing.cache)")
    g.add_argument("--noise-ok", action="store_true",
                   help="search even if two builds of the all-FP16 engine differ beyond the tolerance")


def _jobs(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give the number of evaluations to run at once, 1 or more")
    return value


def add_parallel_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("parallel evaluation")
    g.add_argument("--jobs", "-j", type=_jobs, default=1, metavar="N",
                   help="evaluate up to N plans at once (emulate: N worker processes, each with its own ONNX Runtime "
                        "session; command: N commands; default 1)")
    g.add_argument("--devices", default=None, metavar="0,1,...",
                   help="GPUs to use, one worker each (tensorrt: each sees only its GPU; command: the value of "
                        "{device}; default with --jobs N: the first N GPUs CUDA sees)")
    g.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="evaluate as Ray tasks: on the cluster at ADDRESS ('auto': the one this machine is part of), "
                        "or on a local Ray instance without ADDRESS (needs pip install 'fp16bisect[ray]')")


def parallel_from(args):
    from fp16bisect.parallel import Parallel, parse_devices

    if args.ray is not None:
        from fp16bisect.parallel.ray import load_ray

        load_ray()  # exit 2 with how to install, before any work
    devices = parse_devices(args.devices)
    return Parallel(jobs=args.jobs, devices=devices, ray=args.ray)


def backend_options(args) -> dict:
    if args.backend == "command" and args.check_command is None:
        raise UsageError("--backend command needs the command that judges a plan: add --check 'CMD' "
                         "(e.g. --check 'python judge.py {model} {inputs} {outputs}')")
    if args.check_command is not None and args.backend != "command":
        raise UsageError(f"--check is the command of --backend command, not of --backend {args.backend}: "
                         "add --backend command, or drop --check")
    if args.keep_plans and args.backend != "command":
        raise UsageError("--keep-plans keeps the plan files of --backend command: add --backend command --check "
                         "'CMD', or drop --keep-plans")
    return {"opt_level": args.opt_level, "timing_cache": args.timing_cache, "noise_ok": args.noise_ok,
            "command": args.check_command, "keep_plans": args.keep_plans, "typing": args.typing}


def tolerance_from(args, fallback: Tolerance | None = None) -> Tolerance:
    """The flags' tolerance; flags left unset (None) take ``fallback``'s values."""
    fallback = fallback or Tolerance()
    pick = {k: getattr(args, k) if getattr(args, k) is not None else getattr(fallback, k)
            for k in ("atol", "rtol", "min_cosine", "max_mismatch")}
    if pick["max_mismatch"] > 1:
        raise UsageError(f"--max-mismatch {pick['max_mismatch']:g} is a fraction: give a number from 0 to 1")
    return Tolerance(**pick)


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
    s.add_argument("--check-minimal", action=_Removed, nargs=0, help=argparse.SUPPRESS,
                   default=None)  # removed in 0.x: exit 2 with a hint, for one release
    s.add_argument("--repeats", type=int, default=1, metavar="N",
                   help="evaluate each plan N times (on TensorRT: N builds); all must pass (default 1)")
    s.add_argument("--prior", choices=("auto", "emulate", "none"), default="auto",
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
    s.add_argument("--report", metavar="FILE.html", help="also write a self-contained HTML report")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    add_parallel_args(s)

    c = sub.add_parser("check", help="pre-flight: does the model meet the tolerance in FP16 (with overrides)? "
                                     "exit 0 yes, 1 no")
    add_input_args(c)
    add_tolerance_args(c)
    add_backend_args(c)
    c.add_argument("--overrides", metavar="O.json", help="keep the nodes of this override file in FP32")
    c.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    c.add_argument("--report", metavar="FILE.html", help="also write a self-contained HTML report")
    c.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    add_parallel_args(c)

    b = sub.add_parser("batch", help="check or search many models listed in a manifest (TOML or JSON), in "
                                     "parallel; exit 0 when every entry passes, 1 when any fails")
    b.add_argument("manifest", help="the manifest: entries with model, inputs, references, tolerance, action")
    b.add_argument("--json", metavar="FILE", help="also write every entry's result as JSON")
    b.add_argument("--jobs", "-j", type=_jobs, default=2, metavar="N", help="entries run at once (default 2)")
    b.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run the entries as Ray tasks (on the cluster at ADDRESS, or a local Ray instance)")

    n = sub.add_parser("scan", help="FP32 run only: rank the tensors and weights FP16 would overflow or flush "
                                    "(seconds; no search)")
    n.add_argument("model", help="the ONNX model (FP32)")
    n.add_argument("--inputs", action="append", required=True, metavar="X.npz",
                   help="one sample; repeat for several")
    n.add_argument("--json", metavar="FILE", help="also write the ranking as JSON")
    n.add_argument("--top", type=int, default=20, metavar="N", help="rows to print per table (default 20)")
    n.add_argument("-q", "--quiet", action="store_true", help="no progress output")

    m = sub.add_parser("compare", help="layer-wise: each node's output in FP16 against FP32, in topological "
                                       "order; names the first failing node")
    add_input_args(m)
    add_tolerance_args(m)
    m.add_argument("--overrides", metavar="O.json", help="keep the nodes of this override file in FP32")
    m.add_argument("--csv", metavar="FILE", help="write every node's row as CSV")
    m.add_argument("--report", metavar="FILE.html", help="also write a self-contained HTML report")
    t = m.add_argument_group("layer-wise failure rule (a node fails on inf/NaN where FP32 is finite, or on a "
                             "large error for its own scale)")
    t.add_argument("--max-error", type=_nonnegative, default=None, metavar="FRACTION",
                   help="fail when a tensor's max abs error exceeds this fraction of its max |FP32 value| "
                        "(default 0.125: 256 x FP16's unit roundoff 2^-11)")
    m.add_argument("-q", "--quiet", action="store_true", help="no progress output")

    a = sub.add_parser("apply", help="write the mixed-precision ONNX an override file describes "
                                     "(for strongly typed builds: TensorRT 11, TensorRT-RTX)")
    a.add_argument("overrides", help="the override JSON written by 'fp16bisect search'")
    a.add_argument("model", help="the FP32 ONNX model the overrides were searched on")
    a.add_argument("-o", "--output", required=True, metavar="MIXED.onnx", help="where to write the mixed model")
    a.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    a.add_argument("--fp16-io", action="store_true", help="make float graph inputs and outputs FP16 (default FP32)")
    a.add_argument("--force", action="store_true", help="apply even if the override file was made for another model")
    a.add_argument("--keep-fp32", action="append", default=[], metavar="NODE",
                   help="also keep this node (fp16bisect node id) in FP32; repeat for several")
    a.add_argument("--verify", nargs="?", const="storage", choices=("storage", "strict"), default=None,
                   help="run the written model on --inputs (FP16 storage, FP32 compute) against the references; "
                        "'strict' also runs onnx.reference in FP16 arithmetic (a pessimistic bound)")
    g = a.add_argument_group("samples for --verify")
    g.add_argument("--inputs", action="append", metavar="X.npz", help="one sample; repeat for several")
    g.add_argument("--reference", action="append", metavar="R.npz",
                   help="expected outputs for the matching --inputs (default: an FP32 ONNX Runtime run)")
    add_tolerance_args(a, default_from="the override file's")
    return parser


def cmd_search(args) -> int:
    from fp16bisect.artifacts.files import check_writable, write_json
    from fp16bisect.backends.command import CommandAborted
    from fp16bisect.run.pipeline import search_model
    from fp16bisect.report.console import ConsoleListener, print_summary

    tolerance = tolerance_from(args)
    parallel = parallel_from(args)
    check_writable(args.output)  # before the search, not after an hour of it
    if args.report:
        check_writable(args.report)
    listener = ConsoleListener(quiet=args.quiet)
    if not args.quiet:
        listener.stage(f"tolerance: {tolerance}")
    try:
        if args.repeats < 1:
            raise UsageError(f"--repeats {args.repeats}: give a number of evaluations per plan, 1 or more")
        outcome = search_model(args.model, args.inputs, args.reference, tolerance, args.backend,
                               listener=listener, output=args.output,
                               backend_options=backend_options(args), repeats=args.repeats, restart=args.restart,
                               retry_crashed=args.retry_crashed,
                               parallel=parallel, prior=args.prior)
    except CommandAborted as exc:
        from fp16bisect.run.paths import journal_path

        raise CommandAborted(f"{exc}; finished evaluations are kept in {journal_path(args.output)}: fix the "
                             "command and rerun the same fp16bisect command to continue") from None
    except KeyboardInterrupt:
        listener.close()
        from fp16bisect.run.paths import journal_path

        print(f"fp16bisect: interrupted; finished evaluations are kept in {journal_path(args.output)}: "
              "rerun the same command to continue", file=sys.stderr)
        return 130
    finally:
        listener.close()
    write_json(args.output, outcome.data)
    print_summary(outcome, args.output)
    if args.report:
        from fp16bisect.report.data import search_report

        write_report(args.report, search_report(outcome))
    return 0


def write_report(path: str, data: dict) -> None:
    from fp16bisect.report.html import write

    write(path, data)
    print(f"report written to {path}")


def search_hint(args) -> str:
    import shlex

    judge = ["--backend", "command", "--check", args.check_command] if args.backend == "command" else []
    return shlex.join(["fp16bisect", "search", args.model, *[x for i in args.inputs for x in ("--inputs", i)],
                       *judge])


def cmd_check(args) -> int:
    from fp16bisect.artifacts.files import check_writable, write_json
    from fp16bisect.diagnose.preflight import check_model, verdict
    from fp16bisect.run.paths import plans_dir
    from fp16bisect.report.console import ConsoleListener, print_check

    tolerance = tolerance_from(args)
    parallel = parallel_from(args)
    for path in (args.json, args.report):
        if path:
            check_writable(path)
    listener = ConsoleListener(quiet=args.quiet)
    options = backend_options(args)
    # the command backend's plan files: beside --json, else ./fp16bisect.plans/ (removed unless --keep-plans)
    options["plans_dir"] = plans_dir(args.json) if args.json else "fp16bisect.plans"
    try:
        outcome = check_model(args.model, args.inputs, args.reference, tolerance, args.backend, args.overrides,
                              listener, options, parallel=parallel)
    finally:
        listener.close()
    line = verdict(outcome, search_hint(args))
    print_check(outcome, line)
    if args.json:
        write_json(args.json, {**outcome.data(), "verdict": line})
    if args.report:
        from fp16bisect.report.data import check_report

        write_report(args.report, check_report(outcome, line))
    if outcome.fp32 is not None and not outcome.fp32.passed:
        return 3
    return 0 if outcome.passed else 1


def cmd_batch(args) -> int:
    from fp16bisect.cli.batch import print_table, read_manifest, run_batch, write_results

    entries = read_manifest(args.manifest)
    if args.json:
        from fp16bisect.artifacts.files import check_writable

        check_writable(args.json)
    if args.ray is not None:
        from fp16bisect.parallel.ray import load_ray

        load_ray()
    results = run_batch(entries, jobs=args.jobs, ray=args.ray)
    print_table(results)
    if args.json:
        write_results(args.json, args.manifest, results)
    return 0 if all(r["passed"] for r in results) else 1


def cmd_scan(args) -> int:
    from fp16bisect.artifacts.files import check_writable, write_json
    from fp16bisect.diagnose.scan import scan_model
    from fp16bisect.report.console import ConsoleListener, print_scan

    if args.json:
        check_writable(args.json)
    graph, data = scan_model(args.model, args.inputs, ConsoleListener(quiet=args.quiet))
    print_scan(graph, data, args.top)
    if args.json:
        write_json(args.json, data)
    return 0


def cmd_compare(args) -> int:
    from fp16bisect.artifacts.files import check_writable
    from fp16bisect.diagnose.layerwise import compare_model, write_csv
    from fp16bisect.report.console import ConsoleListener, print_compare

    tolerance = tolerance_from(args)
    for path in (args.csv, args.report):
        if path:
            check_writable(path)
    listener = ConsoleListener(quiet=args.quiet)
    try:
        runner, result = compare_model(args.model, args.inputs, args.reference, args.overrides, args.max_error,
                                       listener)
    finally:
        listener.close()
    print_compare(result, args.csv)
    if args.csv:
        write_csv(args.csv, result)
    if args.report:
        from fp16bisect.report.data import compare_report

        write_report(args.report, compare_report(runner, result, tolerance))
    return 0


def cmd_apply(args) -> int:
    from fp16bisect.artifacts.apply import apply_to_file
    from fp16bisect.artifacts.files import check_writable
    from fp16bisect.report.console import ConsoleListener, print_mixed, print_verification

    if args.verify and not args.inputs:
        raise UsageError("--verify needs samples: pass --inputs X.npz (the npz given to 'fp16bisect search')")
    if str(args.output).endswith(".json"):
        raise UsageError(f"-o {args.output!r} would hold an ONNX model: give a path ending in .onnx")
    check_writable(args.output)
    given = args.atol is not None and args.rtol is not None  # then the file's tolerance is not needed
    mixed, verification = apply_to_file(
        args.overrides, args.model, args.output, ConsoleListener(quiet=args.quiet), fp16_io=args.fp16_io,
        force=args.force, keep_fp32=tuple(args.keep_fp32), inputs=args.inputs if args.verify else None,
        references=args.reference, strict_mode=args.verify == "strict",
        tolerance=lambda recorded: tolerance_from(args, Tolerance() if given else recorded()),
        shown=lambda m: print_mixed(m, args.output))
    if verification is None:
        return 0
    print_verification(verification)
    return 0 if verification.passed else 1


INTERNAL_ERROR = 4  # a bug of ours (0 done, 1 a check failed, 2 bad input, 3 tolerance unreachable, 130 interrupted)


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
        commands = {"search": cmd_search, "check": cmd_check, "scan": cmd_scan, "compare": cmd_compare,
                    "apply": cmd_apply, "batch": cmd_batch}
        return commands[args.command](args)
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
