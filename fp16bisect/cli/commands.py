"""The subcommands: each turns its parsed arguments into typed options, calls the package, prints and writes.

Each returns its exit code: 0 done, 1 a check failed, 3 the tolerance is unreachable even in FP32, 130
interrupted; bad input raises ``UsageError`` (2), which ``main`` turns into one line.
"""

from __future__ import annotations

import sys

from fp16bisect.cli.args import (BackendArgs, OutputArgs, ParallelArgs, PrecisionArgs, ToleranceArgs,
                                  model_then_overrides)
from fp16bisect.errors import CheckFailed, ToleranceUnreachable, UsageError

DONE, CHECK_FAILED, UNREACHABLE, INTERRUPTED = 0, CheckFailed.exit_code, ToleranceUnreachable.exit_code, 130


def cmd_search(args) -> int:
    from fp16bisect.api import run_search
    from fp16bisect.backends.command import CommandAborted
    from fp16bisect.run.options import SearchOptions
    from fp16bisect.run.paths import latest_journal
    from fp16bisect.report.console import ConsoleListener, print_next, print_summary
    from fp16bisect.report.next_steps import next_steps

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
                                retry_crashed=args.retry_crashed, parallel=parallel, prior=args.prior,
                                headroom=args.headroom, precision=PrecisionArgs.parse(args))
        result = run_search(args.model, args.inputs, options, reference=args.reference, progress=listener)
    except CommandAborted as exc:
        raise CommandAborted(f"{exc}; finished evaluations are kept in {latest_journal(args.output)}: fix "
                             "the command and rerun the same fp16bisect command to continue") from None
    except KeyboardInterrupt:
        listener.close()
        print(f"fp16bisect: interrupted; finished evaluations are kept in {latest_journal(args.output)}: "
              "rerun the same command to continue", file=sys.stderr)
        return INTERRUPTED
    finally:
        listener.close()
    print_summary(result.outcome, args.output)  # run_search wrote the override JSON to args.output
    steps = next_steps(result.outcome.data, args.output, args.inputs, args.reference)
    if not args.quiet:
        print_next(steps)
    if args.report:
        from fp16bisect.diagnose.report_runs import search_runs
        from fp16bisect.report.data import search_report

        write_report(args.report, search_report(result.outcome, search_runs(result.outcome, listener.stage), steps),
                     listener.stage)
    return DONE


def write_report(path: str, data: dict, say) -> None:
    from fp16bisect.report.html import write

    write(path, data, say)
    print(f"report written to {path}")


def search_hint(args) -> str:
    """The search command for the model a check found failing: its samples, references, judge, precision,
    headroom and the tolerance flags given."""
    import shlex

    from fp16bisect.tolerance import DEFAULT_ATOL, DEFAULT_RTOL

    judge = ["--backend", "command", "--check", args.check_command] if args.backend == "command" else []
    given = [(flag, getattr(args, key, None)) for flag, key in (
        ("--atol", "atol"), ("--rtol", "rtol"), ("--min-cosine", "min_cosine"), ("--max-mismatch", "max_mismatch"),
        ("--headroom", "headroom"))]
    defaults = {"--atol": DEFAULT_ATOL, "--rtol": DEFAULT_RTOL, "--max-mismatch": 0.0}
    more = [x for flag, value in given if value is not None and value != defaults.get(flag) for x in (flag, f"{value:g}")]
    if getattr(args, "precision", None) not in (None, "fp16"):
        more += ["--precision", args.precision]
    refs = [x for r in (getattr(args, "reference", None) or []) for x in ("--reference", str(r))]
    return shlex.join(["fp16bisect", "search", args.model, *[x for i in args.inputs for x in ("--inputs", str(i))],
                       *refs, *judge, *more])


def cmd_check(args) -> int:
    from fp16bisect.api import run_check
    from fp16bisect.artifacts.files import write_json
    from fp16bisect.run.options import SearchOptions
    from fp16bisect.run.paths import plans_dir
    from fp16bisect.report.console import ConsoleListener, print_check

    tolerance = ToleranceArgs.parse(args)
    parallel = ParallelArgs.parse(args)
    OutputArgs.check(args)
    listener = ConsoleListener(quiet=args.quiet)
    # the command backend's plan files: beside --json, else ./fp16bisect.plans/ (removed unless --keep-plans)
    plans = plans_dir(args.json) if args.json else "fp16bisect.plans"
    options = SearchOptions(tolerance, args.backend, BackendArgs.parse(args, plans), parallel=parallel,
                            headroom=args.headroom, precision=PrecisionArgs.parse(args))
    try:
        result = run_check(args.model, args.inputs, options, overrides=args.overrides, reference=args.reference,
                           progress=listener, hint=search_hint(args), strict_environment=args.strict_environment)
    finally:
        listener.close()
    print_check(result.outcome, result.verdict)
    if args.json:
        write_json(args.json, result.to_dict())
    if args.report:
        from fp16bisect.diagnose.report_runs import check_runs
        from fp16bisect.report.data import check_report

        write_report(args.report, check_report(result.outcome, result.verdict, check_runs(result.outcome,
                                                                                           listener.stage)),
                     listener.stage)
    if not result.reachable:
        return UNREACHABLE
    return DONE if result.passed else CHECK_FAILED


def cmd_batch(args) -> int:
    from fp16bisect.cli.batch import read_manifest, run_batch, write_results
    from fp16bisect.report.console import print_batch

    entries = read_manifest(args.manifest)
    OutputArgs.check(args)
    if args.ray is not None:
        from fp16bisect.parallel.ray import load_ray

        load_ray()
    said = (lambda r: None) if args.quiet else lambda r: print(  # noqa: E731
        f"fp16bisect: {r['name']} (entry {r['number']}): {r['verdict']} in {r['seconds'] or 0:.1f} s",
        file=sys.stderr, flush=True)
    results = run_batch(entries, jobs=args.jobs, ray=args.ray, on_result=said)
    print_batch(results)
    if args.json:
        write_results(args.json, args.manifest, results)
    return DONE if all(r["passed"] for r in results) else CHECK_FAILED


def cmd_scan(args) -> int:
    from fp16bisect.api import scan
    from fp16bisect.artifacts.files import write_json
    from fp16bisect.report.console import ConsoleListener, print_scan

    OutputArgs.check(args)
    result = scan(args.model, args.inputs, progress=ConsoleListener(quiet=args.quiet), precision=args.precision)
    print_scan(result.graph, result.to_dict(), args.top)
    if args.json:
        write_json(args.json, result.to_dict())
    return DONE


def cmd_compare(args) -> int:
    from fp16bisect.diagnose.layerwise import compare_model, outputs_against, write_csv
    from fp16bisect.report.console import ConsoleListener, print_compare

    tolerance = ToleranceArgs.parse(args)
    OutputArgs.check(args)
    listener = ConsoleListener(quiet=args.quiet)
    try:
        runner, result = compare_model(args.model, args.inputs, args.reference, args.overrides, args.max_error,
                                       listener, precision=PrecisionArgs.parse(args))
    finally:
        listener.close()
    print_compare(result, args.csv, outputs_against(runner, result.plan, tolerance), tolerance,
                  low=runner.graph.precision.label)
    if args.csv:
        write_csv(args.csv, result)
    if args.report:
        from fp16bisect.diagnose.report_runs import compare_runs
        from fp16bisect.report.data import compare_report

        runs = compare_runs(runner, result, tolerance, listener.stage)
        write_report(args.report, compare_report(runner, result, tolerance, runs), listener.stage)
    return DONE


def cmd_apply(args) -> int:
    from fp16bisect.api import apply
    from fp16bisect.report.console import ConsoleListener, print_mixed

    args.model, args.overrides = model_then_overrides(args.model, args.overrides)  # the old order works too
    if args.verify and not args.inputs:
        raise UsageError("--verify needs samples: pass --inputs X.npz (the npz given to 'fp16bisect search')")
    if str(args.output).endswith(".json"):
        raise UsageError(f"-o {args.output!r} would hold an ONNX model: give a path ending in .onnx")
    OutputArgs.check(args)
    result = apply(args.model, args.overrides, args.output, verify=args.verify or False, samples=args.inputs,
                   reference=args.reference, atol=args.atol, rtol=args.rtol, min_cosine=args.min_cosine,
                   max_mismatch=args.max_mismatch, fp16_io=args.fp16_io, force=args.force, keep_fp32=args.keep_fp32,
                   progress=ConsoleListener(quiet=args.quiet), shown=lambda m: print_mixed(m, args.output),
                   precision=args.precision)
    return _verified(result)


def _verified(result) -> int:
    """``apply`` and ``migrate``: the written model's verification, when asked for, and its exit code."""
    from fp16bisect.report.console import print_verification

    if result.verification is None:
        return DONE
    print_verification(result.verification)
    return DONE if result.passed else CHECK_FAILED


def cmd_migrate(args) -> int:
    from pathlib import Path

    from fp16bisect.api import apply
    from fp16bisect.artifacts import migrate
    from fp16bisect.artifacts.files import write_json
    from fp16bisect.model.graph import Graph
    from fp16bisect.report.console import ConsoleListener, print_migration, print_mixed

    if args.verify and not args.inputs:
        raise UsageError("--verify needs samples: pass --inputs X.npz")
    if not str(args.output).endswith(".onnx"):
        raise UsageError(f"-o {args.output!r} would hold an ONNX model: give a path ending in .onnx")
    OutputArgs.check(args)
    if args.trtexec_args is not None:
        pins = migrate.pins_from_trtexec(args.trtexec_args)
    else:
        try:
            text = Path(args.layer_precisions).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read --layer-precisions {args.layer_precisions!r} ({exc}): pass a text "
                             "file of LAYER:PRECISION entries") from None
        pins = migrate.pins_from_list(text, args.layer_precisions)
    graph = Graph.load(args.model)
    mapping = migrate.map_layers(graph, pins.fp32)
    overrides = args.overrides_out or str(Path(args.output).with_suffix(".overrides.json"))
    write_json(overrides, migrate.migration(graph, pins, mapping, ToleranceArgs.parse(args).to_json(), overrides))
    if not args.quiet:
        print_migration(pins, mapping, overrides)
    result = apply(args.model, overrides, args.output, verify=args.verify or False, samples=args.inputs,
                   reference=args.reference, fp16_io=args.fp16_io, progress=ConsoleListener(quiet=args.quiet),
                   shown=lambda m: print_mixed(m, args.output))
    if result.verification is not None and result.passed:  # verified here: the file says where
        from fp16bisect.artifacts.overrides import read
        from fp16bisect.backends.emulate.backend import environment_here

        from fp16bisect.artifacts.override_json import SECTIONS

        data = {**read(overrides), "environment": environment_here()}
        write_json(overrides, {k: data[k] for k in sorted(data, key=lambda k: SECTIONS.index(k) if k in SECTIONS
                                                         else len(SECTIONS))})
    return _verified(result)


COMMANDS = {"search": cmd_search, "check": cmd_check, "scan": cmd_scan, "compare": cmd_compare, "apply": cmd_apply,
            "batch": cmd_batch, "migrate": cmd_migrate}
