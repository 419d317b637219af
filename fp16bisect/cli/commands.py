"""The subcommands: each turns its parsed arguments into typed options, calls the package, prints and writes.

Each returns its exit code: 0 done, 1 a check failed, 3 the tolerance is unreachable even in FP32, 130
interrupted; bad input raises ``UsageError`` (2), which ``main`` turns into one line.
"""

from __future__ import annotations

import sys

from fp16bisect.cli.args import BackendArgs, OutputArgs, ParallelArgs, ToleranceArgs
from fp16bisect.errors import CheckFailed, ToleranceUnreachable, UsageError

DONE, CHECK_FAILED, UNREACHABLE, INTERRUPTED = 0, CheckFailed.exit_code, ToleranceUnreachable.exit_code, 130


def cmd_search(args) -> int:
    from fp16bisect.artifacts.files import write_json
    from fp16bisect.backends.command import CommandAborted
    from fp16bisect.run import pipeline
    from fp16bisect.run.options import SearchOptions
    from fp16bisect.run.paths import journal_path
    from fp16bisect.report.console import ConsoleListener, print_summary

    tolerance = ToleranceArgs.parse(args)
    parallel = ParallelArgs.parse(args)
    OutputArgs.check(args)  # before the search, not after an hour of it
    listener = ConsoleListener(quiet=args.quiet)
    if not args.quiet:
        listener.stage(f"tolerance: {tolerance}")
    try:
        if args.repeats < 1:
            raise UsageError(f"--repeats {args.repeats}: give a number of evaluations per plan, 1 or more")
        options = SearchOptions(tolerance, args.backend, BackendArgs.parse(args), noise_ok=args.noise_ok,
                                output=args.output, repeats=args.repeats, restart=args.restart,
                                retry_crashed=args.retry_crashed, parallel=parallel, prior=args.prior)
        outcome = pipeline.search_model(args.model, args.inputs, args.reference, options, listener)
    except CommandAborted as exc:
        raise CommandAborted(f"{exc}; finished evaluations are kept in {journal_path(args.output)}: fix "
                             "the command and rerun the same fp16bisect command to continue") from None
    except KeyboardInterrupt:
        listener.close()
        print(f"fp16bisect: interrupted; finished evaluations are kept in {journal_path(args.output)}: "
              "rerun the same command to continue", file=sys.stderr)
        return INTERRUPTED
    finally:
        listener.close()
    write_json(args.output, outcome.data)
    print_summary(outcome, args.output)
    if args.report:
        from fp16bisect.diagnose.report_runs import search_runs
        from fp16bisect.report.data import search_report

        write_report(args.report, search_report(outcome, search_runs(outcome)))
    return DONE


def write_report(path: str, data: dict) -> None:
    from fp16bisect.report.html import write

    write(path, data)
    print(f"report written to {path}")


def search_hint(args) -> str:
    """The search command for the model a check found failing."""
    import shlex

    judge = ["--backend", "command", "--check", args.check_command] if args.backend == "command" else []
    return shlex.join(["fp16bisect", "search", args.model, *[x for i in args.inputs for x in ("--inputs", i)],
                       *judge])


def cmd_check(args) -> int:
    from fp16bisect.artifacts.files import write_json
    from fp16bisect.diagnose.preflight import check_model, verdict
    from fp16bisect.run.options import SearchOptions
    from fp16bisect.run.paths import plans_dir
    from fp16bisect.report.console import ConsoleListener, print_check

    tolerance = ToleranceArgs.parse(args)
    parallel = ParallelArgs.parse(args)
    OutputArgs.check(args)
    listener = ConsoleListener(quiet=args.quiet)
    # the command backend's plan files: beside --json, else ./fp16bisect.plans/ (removed unless --keep-plans)
    plans = plans_dir(args.json) if args.json else "fp16bisect.plans"
    options = SearchOptions(tolerance, args.backend, BackendArgs.parse(args, plans), parallel=parallel)
    try:
        outcome = check_model(args.model, args.inputs, args.reference, args.overrides, options, listener)
    finally:
        listener.close()
    line = verdict(outcome, search_hint(args))
    print_check(outcome, line)
    if args.json:
        write_json(args.json, {**outcome.data(), "verdict": line})
    if args.report:
        from fp16bisect.diagnose.report_runs import check_runs
        from fp16bisect.report.data import check_report

        write_report(args.report, check_report(outcome, line, check_runs(outcome)))
    if outcome.fp32 is not None and not outcome.fp32.passed:
        return UNREACHABLE
    return DONE if outcome.passed else CHECK_FAILED


def cmd_batch(args) -> int:
    from fp16bisect.cli.batch import read_manifest, run_batch, write_results
    from fp16bisect.report.console import print_batch

    entries = read_manifest(args.manifest)
    OutputArgs.check(args)
    if args.ray is not None:
        from fp16bisect.parallel.ray import load_ray

        load_ray()
    results = run_batch(entries, jobs=args.jobs, ray=args.ray)
    print_batch(results)
    if args.json:
        write_results(args.json, args.manifest, results)
    return DONE if all(r["passed"] for r in results) else CHECK_FAILED


def cmd_scan(args) -> int:
    from fp16bisect.artifacts.files import write_json
    from fp16bisect.diagnose.scan import scan_model
    from fp16bisect.report.console import ConsoleListener, print_scan

    OutputArgs.check(args)
    graph, data = scan_model(args.model, args.inputs, ConsoleListener(quiet=args.quiet))
    print_scan(graph, data, args.top)
    if args.json:
        write_json(args.json, data)
    return DONE


def cmd_compare(args) -> int:
    from fp16bisect.diagnose.layerwise import compare_model, write_csv
    from fp16bisect.report.console import ConsoleListener, print_compare

    tolerance = ToleranceArgs.parse(args)
    OutputArgs.check(args)
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
        from fp16bisect.diagnose.report_runs import compare_runs
        from fp16bisect.report.data import compare_report

        write_report(args.report, compare_report(runner, result, tolerance, compare_runs(runner, result, tolerance)))
    return DONE


def cmd_apply(args) -> int:
    from fp16bisect.artifacts.apply import ApplyOptions, apply_to_file
    from fp16bisect.report.console import ConsoleListener, print_mixed, print_verification
    from fp16bisect.tolerance import Tolerance

    if args.verify and not args.inputs:
        raise UsageError("--verify needs samples: pass --inputs X.npz (the npz given to 'fp16bisect search')")
    if str(args.output).endswith(".json"):
        raise UsageError(f"-o {args.output!r} would hold an ONNX model: give a path ending in .onnx")
    OutputArgs.check(args)
    given = args.atol is not None and args.rtol is not None  # then the file's tolerance is not needed
    options = ApplyOptions(
        fp16_io=args.fp16_io, force=args.force, keep_fp32=tuple(args.keep_fp32),
        inputs=args.inputs if args.verify else None, references=args.reference, strict_mode=args.verify == "strict",
        tolerance=lambda recorded: ToleranceArgs.parse(args, Tolerance() if given else recorded()))
    mixed, verification = apply_to_file(args.overrides, args.model, args.output, ConsoleListener(quiet=args.quiet),
                                        options, shown=lambda m: print_mixed(m, args.output))
    if verification is None:
        return DONE
    print_verification(verification)
    return DONE if verification.passed else CHECK_FAILED


COMMANDS = {"search": cmd_search, "check": cmd_check, "scan": cmd_scan, "compare": cmd_compare, "apply": cmd_apply,
            "batch": cmd_batch}
