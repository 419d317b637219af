#!/usr/bin/env python3
"""Benchmark the emulate backend at scale: the 10,000-candidate model of
``make_sample_models.py --large`` (built into build/large/ when missing). Prints
a Markdown table (pasted into the README).

    python scripts/bench_scale.py [--model M.onnx --inputs M.npz] [--repeats 7] [--no-search]

Target (benchmarked here, never asserted in tests): one emulated evaluation
within 5x of one plain FP32 run of the same model in ONNX Runtime.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import resource
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _samples_module():
    spec = importlib.util.spec_from_file_location("make_sample_models", ROOT / "scripts" / "make_sample_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="an .onnx file (default: the --large model)")
    parser.add_argument("--inputs", type=Path, help="its .npz (default: beside the model)")
    parser.add_argument("--repeats", type=int, default=7, help="runs per median")
    parser.add_argument("--no-search", action="store_true", help="skip the full search")
    args = parser.parse_args()
    culprits = None
    if args.model is None:
        samples_module = _samples_module()
        args.model = ROOT / "build" / "large" / f"{samples_module.LARGE['name']}.onnx"
        culprits = set(samples_module.large_culprits())
        if not args.model.exists():
            samples_module.write_large(args.model.parent)
    npz = args.inputs or args.model.with_suffix(".npz")

    import numpy as np

    from fp16bisect.model.graph import Graph

    rows: list[tuple[str, str]] = []
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"model {args.model}", file=sys.stderr)
    start = time.perf_counter()
    graph = Graph.load(args.model)
    rows.append(("model size", f"{args.model.stat().st_size / 1e6:.1f} MB, {len(graph.model.graph.node)} nodes"))
    rows.append(("candidates", f"{len(graph.candidates)}"))
    rows.append(("load and analyse (Graph.load)", f"{time.perf_counter() - start:.2f} s"))
    with np.load(npz) as data:
        inputs = {k: data[k] for k in data.files}
    backend = emulation_rows(graph, inputs, args.repeats, rows)
    if not args.no_search:
        search_rows(graph, backend, npz, culprits, rows)

    print("| measure | value |\n|---|---|")
    for key, value in rows:
        print(f"| {key} | {value} |")


def emulation_rows(graph, inputs: dict, repeats: int, rows: list[tuple[str, str]]):
    """The plain FP32 session and the emulation's: their set-up, memory and a run's median time; the emulate
    backend, for the search."""
    import numpy as np

    from fp16bisect.backends.emulate import EmulateBackend
    from fp16bisect.backends.emulate.rewrite import Emulation
    from fp16bisect.model.runtime import session

    start = time.perf_counter()
    plain = session(graph.runnable_copy(), "the model")
    rows.append(("plain FP32 session set-up", f"{time.perf_counter() - start:.2f} s"))
    names = [o.name for o in graph.outputs]
    fp32 = median_seconds(lambda: plain.run(names, inputs), repeats)

    tracemalloc.start()
    start = time.perf_counter()
    emulation = Emulation(graph)
    build = time.perf_counter() - start
    python_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    rows.append(("emulation model build", f"{build:.2f} s (Python peak {python_peak / 1e6:.0f} MB), "
                 f"{len(emulation.model.graph.node)} nodes, {len(emulation.owners)} sites "
                 f"({emulation.forms['where']} Where, {emulation.forms['if']} If)"))
    rss_before = peak_rss_mb()
    start = time.perf_counter()
    backend = EmulateBackend(graph)  # the self-test; then, asked for, the model again and the session
    backend.session
    setup = time.perf_counter() - start - build
    rows.append(("emulation session set-up (ONNX Runtime)", f"{setup:.1f} s"))
    rows.append(("peak RSS", f"{rss_before:.0f} MB before the emulation session, {peak_rss_mb():.0f} MB after"))

    everything = frozenset(backend.index)
    rng = np.random.default_rng(5)
    half = frozenset(i for i in everything if rng.random() < 0.5)
    emulated = median_seconds(lambda: backend.run(frozenset(), inputs), repeats)
    emulated_half = median_seconds(lambda: backend.run(half, inputs), repeats)
    rows.append(("one plain FP32 run (median)", f"{fp32 * 1000:.1f} ms"))
    rows.append(("one emulated evaluation, all FP16 (median)", f"{emulated * 1000:.1f} ms"))
    rows.append(("one emulated evaluation, random half in FP32 (median)", f"{emulated_half * 1000:.1f} ms"))
    ratio = max(emulated, emulated_half) / fp32
    rows.append(("emulated / plain FP32 (target <= 5x)", f"{ratio:.1f}x ({'met' if ratio <= 5 else 'MISSED'})"))
    return backend


def search_rows(graph, backend, npz: Path, culprits: set | None, rows: list[tuple[str, str]]) -> None:
    """A full search at the default tolerance on the emulate backend: its evaluations, time, the set against the
    planted culprits (when the model is the --large one), and the peak RSS at the end."""
    from fp16bisect.algorithm.search import search
    from fp16bisect.evaluation.oracle import Oracle
    from fp16bisect.model.profile import profile
    from fp16bisect.model.samples import add_fp32_references, load_samples
    from fp16bisect.tolerance import Tolerance

    start = time.perf_counter()
    samples = load_samples(graph, [str(npz)])
    add_fp32_references(graph, samples)
    oracle = Oracle(backend, samples, Tolerance(), graph.float_output_names())
    prof = profile(graph, samples)
    prepared = time.perf_counter() - start
    start = time.perf_counter()
    result = search([n.id for n in graph.candidates], oracle, order=prof.order, suspects=prof.suspects)
    seconds = time.perf_counter() - start
    found = set(result.fp32)
    same = "n/a" if culprits is None else ("yes" if found == culprits else f"NO: found {sorted(found)}, planted {sorted(culprits)}")
    rows.append(("full search (default tolerance)",
                 f"{result.evaluations} evaluations in {seconds:.1f} s (+ {prepared:.1f} s references and "
                 f"FP32 profile); {len(found)} node(s) kept in FP32, {result.minimality}"))
    rows.append(("found set == planted", same))
    rows.append(("peak RSS at the end", f"{peak_rss_mb():.0f} MB"))


if __name__ == "__main__":
    main()
