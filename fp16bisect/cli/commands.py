"""The subcommands: each turns its parsed arguments into typed options, calls the package, prints and writes.

Each returns its exit code: 0 done, 1 a check failed, 3 the tolerance is unreachable even in FP32, 5 a search's
budget ended it (the smallest set seen to pass written), 130 interrupted; bad input raises ``UsageError`` (2),
which ``main`` turns into one line.
"""

from __future__ import annotations

import sys

from fp16bisect.cli.args import Fields, OutputArgs, model_then_overrides, option_groups, parsed, tolerance_group
from fp16bisect.errors import CheckFailed, Interrupted, ToleranceUnreachable, UsageError
from fp16bisect.records import APPLY, CHECK, COMPARE, MIGRATE, SCAN, SEARCH, spelled_as_flags
from fp16bisect.run.options import CheckOptions, SearchOptions, Space

DONE, CHECK_FAILED, UNREACHABLE, INTERRUPTED = 0, CheckFailed.exit_code, ToleranceUnreachable.exit_code, 130
# --max-evaluations or --time-limit ended the search: its answer passes and is written, but the search did not finish
# (not 0, which says the search is done; not 1, which says a check failed); rerunning it continues from the journal
BUDGET_REACHED = 5


def cmd_search(args) -> int:
    from fp16bisect.api import run_search
    from fp16bisect.backends.command import CommandAborted
    from fp16bisect.run.paths import latest_journal
    from fp16bisect.report.console import ConsoleListener, print_next, print_summary
    from fp16bisect.report.next_steps import next_steps

    options = SearchOptions(**parsed(option_groups(SearchOptions, SEARCH), args), output=args.output)
    OutputArgs.check(args)  # before the search, not after an hour of it
    listener = ConsoleListener(quiet=args.quiet)
    if not args.quiet:
        listener.stage(f"tolerance: {options.tolerance}")
    try:
        result = run_search(args.model, args.inputs, options, reference=args.reference, progress=listener)
    except CommandAborted as exc:
        raise CommandAborted(f"{exc}; finished evaluations are kept in {latest_journal(args.output)}: fix "
                             "the command and rerun the same fp16bisect command to continue") from None
    except Interrupted as stop:  # Ctrl-C, the smallest set seen to pass written
        result = stop.result
    except KeyboardInterrupt:
        listener.close()
        print(f"fp16bisect: interrupted; finished evaluations are kept in {latest_journal(args.output)}: "
              "rerun the same command to continue", file=sys.stderr)
        return INTERRUPTED
    finally:
        listener.close()
    print_summary(result.outcome, args.output)  # run_search wrote the override JSON to args.output
    steps = next_steps(result.to_dict(), result.outcome.run)
    if not args.quiet:
        print_next(steps)
    if args.report:
        _report(result, args.report, listener, next_steps=steps)
    return _ended(result.outcome.result.stopped, args.output)


def _ended(stop, output: str) -> int:
    """A search's exit code; when a budget or Ctrl-C ended it early, first a line saying what was written and how
    to go on."""
    if stop is None:
        return DONE
    from fp16bisect.algorithm.budget import INTERRUPT
    from fp16bisect.run.paths import latest_journal

    print(f"fp16bisect: {stop.label} ({stop.said}): the smallest set seen to pass is written to {output}; the "
          f"journal keeps every evaluation ({latest_journal(output)}): rerun the same command to continue (with "
          "a larger budget, or none)", file=sys.stderr)
    return INTERRUPTED if stop.cause == INTERRUPT else BUDGET_REACHED


def _report(result, path: str, listener, **more) -> None:
    from fp16bisect.api import write_report

    write_report(result, path, progress=listener, **more)
    print(f"report written to {path}")


def cmd_check(args) -> int:
    from fp16bisect.api import run_check
    from fp16bisect.artifacts.files import write_json
    from fp16bisect.run.paths import plans_dir
    from fp16bisect.report.console import ConsoleListener, print_check

    # the tolerance given (the rest: the override file's, else the defaults); the command backend's plan files:
    # beside --json, else ./fp16bisect.plans/ (removed unless --keep-plans)
    options = CheckOptions(**parsed(option_groups(CheckOptions, CHECK), args),
                           plans=plans_dir(args.json) if args.json else None)
    OutputArgs.check(args)
    listener = ConsoleListener(quiet=args.quiet)
    try:
        result = run_check(args.model, args.inputs, options, overrides=args.overrides, reference=args.reference,
                           progress=listener, as_command=True)
    finally:
        listener.close()
    print_check(result.outcome, result.verdict)
    if args.json:
        write_json(args.json, result.to_dict())
    if args.report:
        _report(result, args.report, listener)
    if not result.reachable:
        return UNREACHABLE
    return DONE if result.passed else CHECK_FAILED


def cmd_batch(args) -> int:
    from fp16bisect.api import batch
    from fp16bisect.report.console import print_batch

    OutputArgs.check(args)
    result = batch(args.manifest, jobs=args.jobs, ray=args.ray, progress=None if args.quiet else _stderr)
    print_batch([r.to_json() for r in result.entries])
    if args.json:
        result.write(args.json)
    return DONE if result.passed else CHECK_FAILED


def _stderr(line: str) -> None:
    print(f"fp16bisect: {line}", file=sys.stderr, flush=True)


def cmd_scan(args) -> int:
    from fp16bisect.api import scan
    from fp16bisect.artifacts.files import write_json
    from fp16bisect.report.console import ConsoleListener, print_scan

    space = Fields(Space, SCAN, "precision").parse(args)
    OutputArgs.check(args)
    result = scan(args.model, args.inputs, progress=ConsoleListener(quiet=args.quiet), precision=space.precision)
    print_scan(result.graph, result.to_dict(), args.top)
    if args.json:
        write_json(args.json, result.to_dict())
    return DONE


def cmd_compare(args) -> int:
    from fp16bisect.api import compare
    from fp16bisect.report.console import ConsoleListener, print_compare

    tolerance, space = tolerance_group(COMPARE).parse(args), Fields(Space, COMPARE, "judging").parse(args)
    OutputArgs.check(args)
    listener = ConsoleListener(quiet=args.quiet)
    try:
        with spelled_as_flags():  # --max-error's check names the flag
            result = compare(args.model, args.inputs, reference=args.reference, overrides=args.overrides,
                             tolerance=tolerance, space=space, max_error=args.max_error, progress=listener)
    finally:
        listener.close()
    print_compare(result.layerwise, args.csv, result.outputs, result.tolerance,
                  low=result.runner.graph.precision.label)
    if args.csv:
        result.write_csv(args.csv)
    if args.report:
        _report(result, args.report, listener)
    return DONE


def cmd_apply(args) -> int:
    from fp16bisect.api import apply
    from fp16bisect.report.console import ConsoleListener

    args.model, args.overrides = model_then_overrides(args.model, args.overrides)  # the old order works too
    if args.verify and not args.inputs:
        raise UsageError("--verify needs samples: pass --inputs X.npz (the npz given to 'fp16bisect search')")
    if str(args.output).endswith(".json"):
        raise UsageError(f"-o {args.output!r} would hold an ONNX model: give a path ending in .onnx")
    tolerance, space = tolerance_group(APPLY).parse(args), Fields(Space, APPLY, "judging").parse(args)
    OutputArgs.check(args)
    result = apply(args.model, args.overrides, args.output, verify=args.verify or False, samples=args.inputs,
                   reference=args.reference, tolerance=tolerance, space=space, fp16_io=args.fp16_io,
                   force=args.force, keep_fp32=args.keep_fp32, progress=ConsoleListener(quiet=args.quiet),
                   shown=Written(args.output))
    return _verified(result)


class Written:
    """Prints what ``apply`` and ``migrate`` wrote to ``path``, once it is written."""

    def __init__(self, path: str):
        self.path = path

    def __call__(self, mixed) -> None:
        from fp16bisect.report.written import print_mixed

        print_mixed(mixed, self.path)


def _verified(result) -> int:
    """``apply`` and ``migrate``: the written model's verification, when asked for, and its exit code."""
    from fp16bisect.report.written import print_verification

    if result.verification is None:
        return DONE
    print_verification(result.verification, summed=getattr(result, "fp16_sums", None))  # migrate has none
    return DONE if result.passed else CHECK_FAILED


def cmd_migrate(args) -> int:
    from fp16bisect.api import migrate
    from fp16bisect.report.console import ConsoleListener, print_migration

    if args.verify and not args.inputs:
        raise UsageError("--verify needs samples: pass --inputs X.npz")
    if not str(args.output).endswith(".onnx"):
        raise UsageError(f"-o {args.output!r} would hold an ONNX model: give a path ending in .onnx")
    tolerance = tolerance_group(MIGRATE).parse(args)
    OutputArgs.check(args)
    result = migrate(args.model, args.output, trtexec_args=args.trtexec_args, layer_precisions=args.layer_precisions,
                     overrides_out=args.overrides_out, verify=args.verify or False, samples=args.inputs,
                     reference=args.reference, tolerance=tolerance, fp16_io=args.fp16_io,
                     progress=ConsoleListener(quiet=args.quiet), shown=Written(args.output))
    if not args.quiet:
        print_migration(result.pins, result.mapping, str(result.overrides))
    return _verified(result.applied)


def cmd_kernels(args) -> int:
    import shlex

    from fp16bisect.api.kernels import kernel_plan
    from fp16bisect.artifacts.files import write_json
    from fp16bisect.report.console import ConsoleListener
    from fp16bisect.report.kernel_plan import print_kernel_plan, write_page

    OutputArgs.check(args)
    listener = ConsoleListener(quiet=args.quiet)
    try:
        plan = kernel_plan(args.model, args.overrides, fp16_io=args.fp16_io, force=args.force,
                           min_shapes=args.min_shapes, opt_shapes=args.opt_shapes, max_shapes=args.max_shapes,
                           progress=listener).to_dict()
    finally:
        listener.close()
    print_kernel_plan(plan)
    if args.json:
        write_json(args.json, plan)
    if args.report:
        write_page(args.report, plan, shlex.join(["fp16bisect", "kernels", args.model, args.overrides]))
        print(f"report written to {args.report}")
    return DONE


COMMANDS = {"search": cmd_search, "check": cmd_check, "scan": cmd_scan, "compare": cmd_compare, "apply": cmd_apply,
            "batch": cmd_batch, "migrate": cmd_migrate, "kernels": cmd_kernels}
