#!/usr/bin/env python3
"""Benchmark the search: evaluations on synthetic oracles and sample models, and
the emulated oracle's speed. Prints Markdown tables (pasted into the README).

    python scripts/bench_search.py [--trials 20] [--quick]

Targets (benchmarked here, never asserted in tests):
  * one overflow site (k <= 3 chain) with a right suspicion order: <= 2k + 6 evaluations in all
  * k culprits among n, no useful order: <= 2k*log2(n/k) + 2k + 3 evaluations
  * emulated oracle: >= 5x the plans per second of a fresh ONNX Runtime session per plan
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fp16bisect.algorithm.search import group_testing_bound, quickxplain_bound, search  # noqa: E402


def synthetic(trials: int, sizes, ks) -> list[str]:
    rows = [
        "| n | k | order | evaluations mean | max | log2 C(n,k) | max / log2 C(n,k) | 2k·log2(n/k)+2k+3 | within |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    rng = random.Random(2026)
    for n in sizes:
        for k in ks:
            counts = []
            for _ in range(trials):
                ids = list(range(n))
                culprits = frozenset(rng.sample(ids, k))
                rng.shuffle(ids)
                result = search(ids, lambda plan: culprits <= plan)
                assert set(result.fp32) == culprits and result.minimal
                counts.append(result.evaluations)
            lower = group_testing_bound(n, k)
            bound = quickxplain_bound(n, k) + 3
            ratio = f"{max(counts) / lower:.2f}" if lower else "-"
            rows.append(
                f"| {n} | {k} | none | {statistics.mean(counts):.1f} | {max(counts)} | {lower:.1f} | {ratio} "
                f"| {bound:.1f} | {'yes' if max(counts) <= bound else 'NO'} |"
            )
    for n in sizes:
        for k in (1, 2, 3):
            ids = list(range(n))
            culprits = frozenset(range(k))  # a chain at the head of a right order
            result = search(ids, lambda plan: culprits <= plan, order=ids, suspects=min(n, 20))
            rows.append(
                f"| {n} | {k} | right (20 suspects) | {result.evaluations} | {result.evaluations} | - | - "
                f"| 2k+6 = {2 * k + 6} | {'yes' if result.evaluations <= 2 * k + 6 else 'NO'} |"
            )
    return rows


def sample_models() -> list[str]:
    from fp16bisect.run.options import SearchOptions
    from fp16bisect.run.pipeline import search_model
    from fp16bisect.tolerance import Tolerance

    spec_path = ROOT / "scripts" / "make_sample_models.py"
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_sample_models", spec_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = [
        "| model | candidates | FP32 set found | known set | evaluations | one-site target 2k+6 | seconds |",
        "|---|---:|---|---|---:|---:|---:|",
    ]
    for name, known in module.KNOWN.items():
        model = ROOT / "sample_models" / f"{name}.onnx"
        tol = Tolerance(atol=known.get("atol", 1e-2), rtol=known.get("rtol", 1e-2))
        start = time.perf_counter()
        outcome = search_model(str(model), [str(model.with_suffix(".npz"))], options=SearchOptions(tol))
        seconds = time.perf_counter() - start
        found = list(outcome.result.fp32)
        k = len(found)
        one_site = 0 < k <= 3  # the "one overflow site" target applies
        rows.append(
            f"| {name} | {len(outcome.graph.candidates)} | {', '.join(found) or '(none)'} "
            f"| {'same' if sorted(found) == sorted(known['culprits']) else ', '.join(known['culprits'])} "
            f"| {outcome.result.evaluations} | {2 * k + 6 if one_site else '-'} | {seconds:.2f} |"
        )
    return rows


def oracle_speed(plans: int) -> list[str]:
    import numpy as np

    from fp16bisect.backends.emulate import EmulateBackend
    from fp16bisect.model.graph import Graph
    from fp16bisect.model.runtime import session

    sys.path.insert(0, str(ROOT / "tests"))  # the fresh-session-per-plan baseline lives with the tests checked against it
    from emulated_plans import run_plan_model

    model = ROOT / "sample_models" / "transformer_block.onnx"
    graph = Graph.load(model)
    with np.load(model.with_suffix(".npz")) as data:
        inputs = {k: data[k] for k in data.files}
    ids = [n.id for n in graph.candidates]
    rng = random.Random(7)
    chosen = [frozenset(rng.sample(ids, rng.randint(0, len(ids)))) for _ in range(plans)]
    start = time.perf_counter()
    backend = EmulateBackend(graph)
    setup = time.perf_counter() - start
    start = time.perf_counter()
    for plan in chosen:
        backend.run(plan, inputs)
    one_session = time.perf_counter() - start
    start = time.perf_counter()
    for plan in chosen:
        run_plan_model(graph, plan, inputs)
    fresh = time.perf_counter() - start
    plain = session(graph.runnable_copy(), "the model")
    names = [o.name for o in graph.outputs]
    start = time.perf_counter()
    for _ in chosen:
        plain.run(names, inputs)
    fp32 = time.perf_counter() - start
    return [
        f"| way (transformer_block, {len(ids)} candidates, {plans} random plans) | plans/s | speed-up |",
        "|---|---:|---:|",
        f"| one session, plan as a graph input (set-up {setup * 1000:.0f} ms once) | {plans / one_session:.0f} "
        f"| {fresh / one_session:.1f}x |",
        f"| fresh ONNX Runtime session per plan | {plans / fresh:.0f} | 1.0x |",
        f"| (for scale) the plain FP32 model, no emulation | {plans / fp32:.0f} | - |",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20, help="random culprit sets per (n, k)")
    parser.add_argument("--quick", action="store_true", help="fewer trials and plans (smoke run)")
    args = parser.parse_args()
    trials = 3 if args.quick else args.trials
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"backend: emulate (ONNX Runtime CPU)\n")
    print("## Synthetic oracles (random planted culprit sets, random candidate order)\n")
    print("\n".join(synthetic(trials, (100, 1000, 10000), (1, 2, 4, 8))))
    print("\n## Sample models (emulate backend)\n")
    print("\n".join(sample_models()))
    print("\n## Emulated oracle speed\n")
    print("\n".join(oracle_speed(10 if args.quick else 50)))


if __name__ == "__main__":
    main()
