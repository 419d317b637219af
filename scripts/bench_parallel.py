#!/usr/bin/env python3
"""Benchmark parallel evaluation: rounds and wall time against N (plans evaluated at once).

    python scripts/bench_parallel.py [--delay 0.2] [--quick] [--ray]

* Synthetic oracles (``test = culprits <= plan``) whose every evaluation sleeps ``--delay`` seconds in a
  thread, N threads at once: wall time is then rounds x delay, meaningful even on a 2-core machine.
* Certification of a prior that agrees: ``search(start=S)`` (the prior's set): S, then its k removals.
* The sample models on the emulate backend with ``--jobs N`` worker processes (the wall time includes
  spawning N processes and building N ONNX Runtime sessions; the sample models evaluate in milliseconds).
* An expensive judge: the command backend running scripts/judge_onnxruntime.py per plan, with the emulator's
  set as its prior (certified there: S, then its k removals), N commands at once.

Targets (never asserted in tests): N = 8 certifies an agreeing prior of k members (all-FP16 on the judge, the
prior's set, its k removals) in ceil((k + 2) / 8) rounds instead of k + 2;
overall rounds at N = 8 at most half of N = 1 for k >= 4. Prints Markdown tables (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fp16bisect.algorithm.search import search  # noqa: E402

WIDTHS = (1, 2, 4, 8)


def delayed(culprits: frozenset, delay: float, width: int):
    """test and test_many over a sleeping oracle, ``width`` evaluations at once."""
    pool = ThreadPoolExecutor(max_workers=width)

    def test(plan):
        time.sleep(delay)
        return culprits <= plan

    def test_many(plans):
        return list(pool.map(test, plans))

    return test, (test_many if width > 1 else None), pool


def synthetic(delay: float, cases) -> list[str]:
    rows = ["| case | n | k | N | rounds | rounds(N)/rounds(1) | evaluations | wall s | same set, minimal |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for label, n, k, suspects, seed in cases:
        rng = random.Random(seed)
        ids = list(range(n))
        culprits = frozenset(rng.sample(range(suspects), k) if suspects else rng.sample(ids, k))
        order = ids if suspects else rng.sample(ids, n)
        base = None
        for width in WIDTHS:
            test, test_many, pool = delayed(culprits, delay, width)
            start = time.perf_counter()
            r = search(ids, test, order=order, suspects=suspects, test_many=test_many, width=width)
            wall = time.perf_counter() - start
            pool.shutdown()
            base = base or r
            ok = set(r.fp32) == set(base.fp32) == culprits and r.minimal
            rows.append(f"| {label} | {n} | {k} | {width} | {r.rounds} | {r.rounds / base.rounds:.2f} "
                        f"| {r.evaluations} | {wall:.1f} | {'yes' if ok else 'NO'} |")
    return rows


def certification(delay: float, n: int, ks) -> list[str]:
    how = "search(start=S), S the culprits (a prior that agrees)"
    rows = [f"Certification: {how}.", "",
            "| k | N | rounds | rounds of the certification | target | evaluations | wall s |",
            "|---:|---:|---:|---:|---|---:|---:|"]
    rng = random.Random(7)
    for k in ks:
        culprits = frozenset(rng.sample(range(n), k))
        for width in (1, 8):
            test, test_many, pool = delayed(culprits, delay, width)
            start = time.perf_counter()
            r = search(range(n), test, start=culprits, test_many=test_many, width=width)
            phases = ("precondition", "start", "minimality")  # all-FP16 on the judge, S, its removals
            wall = time.perf_counter() - start
            pool.shutdown()
            assert set(r.fp32) == culprits and r.minimal
            cert = len({s.round for s in r.trace if s.phase in phases})
            target = f"k+2 = {k + 2}" if width == 1 else f"ceil((k+2)/N) = {-(-(k + 2) // width)}"
            rows.append(f"| {k} | {width} | {r.rounds} | {cert} | {target} | {r.evaluations} | {wall:.1f} |")
    return rows


def search_sample(name: str, parallel, **options):
    """``search_model`` on a sample model at its known tolerance: the outcome's result and the wall time."""
    from bench_peers import load_known

    from fp16bisect.run.options import SearchOptions
    from fp16bisect.run.pipeline import search_model
    from fp16bisect.tolerance import Tolerance

    known = load_known()[name]
    start = time.perf_counter()
    o = search_model(str(ROOT / "sample_models" / f"{name}.onnx"), [str(ROOT / "sample_models" / f"{name}.npz")],
                     options=SearchOptions(Tolerance(known["atol"], known["rtol"]), parallel=parallel, **options))
    return o.result, time.perf_counter() - start


def sample_models(widths, ray: bool) -> list[str]:
    from fp16bisect.parallel import Parallel

    rows = ["| model | where | N | rounds | rounds(N)/rounds(1) | evaluations | wall s | set |",
            "|---|---|---:|---:|---:|---:|---:|---|"]
    runs = [("local", w) for w in widths] + ([("ray", 2)] if ray else [])
    for name in ("transformer_block", "two_branches", "accumulation"):
        base = None
        for where, width in runs:
            r, wall = search_sample(name, Parallel(jobs=width, ray="" if where == "ray" else None), judge="emulate")
            base = base or r
            same = "same" if r.fp32 == base.fp32 and r.minimal else "DIFFERENT"
            rows.append(f"| {name} | {where} | {width} | {r.rounds} | {r.rounds / base.rounds:.2f} "
                        f"| {r.evaluations} | {wall:.2f} | {same} |")
    return rows


def command_backend(widths) -> list[str]:
    """An expensive judge: --backend command with scripts/judge_onnxruntime.py --provider cpu (a fresh Python and
    ONNX Runtime session per plan), the emulator's set as the prior (--prior auto), N commands at once."""
    import tempfile

    from fp16bisect.run.options import Judge
    from fp16bisect.parallel import Parallel

    judge = f"{sys.executable} {ROOT / 'scripts' / 'judge_onnxruntime.py'} --provider cpu {{model}} {{inputs}} {{outputs}}"
    rows = ["| model | N | prior agreed | rounds | rounds(N)/rounds(1) | evaluations | wall s | set |",
            "|---|---:|---|---:|---:|---:|---:|---|"]
    for name in ("transformer_block", "two_branches"):
        base = None
        for width in widths:
            with tempfile.TemporaryDirectory() as tmp:
                r, wall = search_sample(name, Parallel(jobs=width), judge=Judge("command", check=judge),
                                        output=str(Path(tmp) / "o.json"))
            base = base or r
            same = "same" if r.fp32 == base.fp32 and r.minimal else "DIFFERENT"
            rows.append(f"| {name} | {width} | {r.agreed} | {r.rounds} | {r.rounds / base.rounds:.2f} "
                        f"| {r.evaluations} | {wall:.1f} | {same} |")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--delay", type=float, default=0.2, help="seconds per synthetic evaluation (default 0.2)")
    p.add_argument("--quick", action="store_true", help="fewer synthetic cases")
    p.add_argument("--ray", action="store_true", help="also run the sample models on a local Ray instance")
    args = p.parse_args()
    print(f"Machine: {platform.platform()}, {os.cpu_count()} CPU(s); Python {platform.python_version()}; "
          f"synthetic delay {args.delay} s per evaluation")
    print()
    cases = [("one site, right order (20 suspects)", 200, 1, 20, 1),
             ("chain of 3, right order", 200, 3, 20, 2),
             ("k = 4 clustered, right order", 200, 4, 20, 3),
             ("k = 2, no order", 100, 2, 0, 4),
             ("k = 4, no order", 100, 4, 0, 5),
             ("k = 8, no order", 100, 8, 0, 6)]
    if args.quick:
        cases = cases[::2]
    print("\n".join(synthetic(args.delay, cases)))
    print()
    print("\n".join(certification(args.delay, 100, (2, 4, 8, 16))))
    print()
    print("Sample models, emulate backend (wall time includes starting the workers):")
    print()
    print("\n".join(sample_models(WIDTHS, args.ray)))
    print()
    print("Command backend (scripts/judge_onnxruntime.py --provider cpu per plan), the emulator's set as prior:")
    print()
    print("\n".join(command_backend((1, 2, 4))))


if __name__ == "__main__":
    main()
