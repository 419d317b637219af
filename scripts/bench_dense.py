#!/usr/bin/env python3
"""Dense cases: evaluations and set sizes against onnxconverter-common's SegmentList, on the emulator and on a
judge that disagrees with it, on real models nobody here wrote. Prints a Markdown table (docs/benchmarks.md).

    python scripts/bench_dense.py [--models a,b,...] [--minimum]

Each model runs at a tolerance of half its all-FP16 max abs error (atol, rtol 0), where many nodes share the
blame (accumulated rounding, not one overflow). Rows:

* ``emulate``: the pipeline's search on the emulate backend (``order``/``suspects`` from the FP32 profile,
  ``reorder`` by measured effect when no suspect prefix passes: one emulator run per candidate, counted apart
  as "ranking runs", not as evaluations) against SegmentList on the same emulated oracle.
* ``judge (fewer)``: a runtime that rounds fewer tensors than the emulator (``scripts/judge_emulate_variant.py
  --fewer``: elementwise epilogues fused into the Conv/MatMul before them never round), in process; the same
  counts as ``--backend command`` with that script. With the prior (the pipeline's default on a non-emulate
  backend: the emulator's search, then ``search(start=...)`` with its alternatives), without it
  (``--prior none``: the profile's order, no effect ranking there), and SegmentList on the same judge.

``--minimum`` (issue 36) adds a second table: per model, the emulate search again with ``--minimum`` (its default
budget: 3x the search's evaluations, at least 20): the 1-minimal set and its evaluations, the smallest set found,
proven or not (and whether the proof assumes monotone verdicts), the lower bound, and the evaluations the minimum
cost beyond the search (the loop and the certification). Target: proven within 3x the search's evaluations.

Targets (issue 20): on the emulator, evaluations at most SegmentList's and a set no larger; on the judge with the
prior, at most half of SegmentList's evaluations. Every answer is checked afterwards on a separate memo of its
oracle (it passes; every single removal fails), never counted. "file KB": the override JSON the CLI writes for
the emulate search (``fp16bisect search -o``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts"), str(ROOT / "tests")]

from bench_expensive import Variant, detector_image, judge_row, real_models, segment_list  # noqa: E402
from judge_emulate_variant import fused_epilogues  # noqa: E402

from fp16bisect.strategy import prior as priors  # noqa: E402
from fp16bisect.strategy.minimum import AUTO  # noqa: E402
from fp16bisect.strategy.alternatives import Alternatives  # noqa: E402
from fp16bisect.artifacts.files import write_json  # noqa: E402
from fp16bisect.backends.emulate import EmulateBackend  # noqa: E402
from fp16bisect.model.graph import Graph  # noqa: E402
from fp16bisect.model.profile import profile  # noqa: E402
from fp16bisect.model.samples import Sample, add_fp32_references  # noqa: E402
from fp16bisect.evaluation.oracle import Oracle  # noqa: E402
from fp16bisect.evaluation.space import PlanSpace, View  # noqa: E402
from fp16bisect.run.options import Journaling, SearchOptions, Strategy  # noqa: E402
from fp16bisect.run.pipeline import Listener, search_model  # noqa: E402
from fp16bisect.algorithm.search import Hooks, search  # noqa: E402
from fp16bisect.tolerance import Tolerance  # noqa: E402


def models() -> dict:
    """bench_expensive's real models, nudenet also at the 320x320 the issue saw, and ddddocr's detector."""
    import real_models as rm

    rows = {}
    for label, spec in real_models().items():
        rows[label] = spec
        if label.startswith("nudenet"):
            rows["nudenet 320n (320x320)"] = (rm.NUDENET_320N, lambda: {
                "images": np.random.default_rng(0).random((1, 3, 320, 320), dtype=np.float32)})
    rows["ddddocr det (416x416)"] = (rm.DDDDOCR_DET, lambda: {"images": detector_image(416, 416)})
    return rows


def loose(found, judge) -> int:
    """Members of a passing set whose removal passes too (0: 1-minimal), judged afresh."""
    return sum(1 for m in found if judge(found - {m}))


def minimum_row(label: str, path: Path, inputs: Path, tol: Tolerance, first, work: Path) -> dict:
    """The emulate search again with ``--minimum`` (a journal of its own): what the minimum cost beyond it."""
    begin = time.perf_counter()
    outcome = search_model(str(path), [str(inputs)], options=SearchOptions(
        tol, "emulate", strategy=Strategy(minimum=AUTO), journal=Journaling(restart=True),
        output=str(work / f"{path.stem}.minimum.json")))
    least, result = outcome.minimum, outcome.result
    extra = result.evaluations - first.evaluations
    proven = "-" if least is None else ("yes" if least.found.proven else "no") + (
        " (assumes monotone)" if least is not None and least.found.assumes_monotone else "")
    return {"model": label, "n": len(outcome.graph.candidates), "k1": len(first.fp32), "e1": first.evaluations,
            "k": len(result.fp32), "proven": proven, "bound": "-" if least is None else least.to_json()["lower_bound"],
            "loop": "-" if least is None else least.found.evaluations, "extra": extra,
            "ratio": extra / max(1, first.evaluations),
            "target": "yes" if least is not None and least.found.proven and extra <= 3 * first.evaluations else "NO",
            "contradicted": "-" if least is None else ("yes" if least.found.contradicted else "no"),
            "seconds": time.perf_counter() - begin}


def bench(label: str, which, make, work: Path, minimum: bool = False) -> list[dict]:
    import real_models as rm

    path = rm.real_model(which)
    graph = Graph.load(path)
    samples = [Sample("generated", make())]
    add_fp32_references(graph, samples)
    emulator = EmulateBackend(graph)
    outputs = graph.float_output_names()
    got = emulator.run(frozenset(), samples[0].inputs)
    err = max(float(np.max(np.abs(got[o] - samples[0].reference[o]))) for o in outputs)
    tol = Tolerance(atol=err / 2, rtol=0.0)
    ids = [n.id for n in graph.candidates]
    rows = []

    # the emulate backend, end to end as the CLI runs it (the override file written as the CLI writes it)
    inputs = work / f"{path.stem}.npz"
    np.savez(inputs, **samples[0].inputs)
    out = work / f"{path.stem}.json"
    begin = time.perf_counter()
    outcome = search_model(str(path), [str(inputs)],
                           options=SearchOptions(tol, "emulate", journal=Journaling(restart=True),
                                                                 output=str(out)))
    seconds = time.perf_counter() - begin
    write_json(str(out), outcome.overrides.to_json())
    result = outcome.result
    ranked = any(s.phase == "grow" for s in result.trace) and result.status == "found"
    judge = Oracle(emulator, samples, tol, outputs)
    seg_evals, seg_set = segment_list(graph, Oracle(emulator, samples, tol, outputs))
    rows.append({
        "model": label, "n": len(ids), "atol": tol.atol, "judge": "emulate",
        "ours": f"{result.evaluations}", "ours_k": len(result.fp32),
        "extra": (f"{len(ids)} ranking runs" if ranked and any(s.phase == "grow" for s in result.trace) else "-"),
        "none": "-", "none_k": "-", "seg": seg_evals, "seg_k": len(seg_set) if seg_set is not None else "-",
        "seg_loose": loose(seg_set, judge) if seg_set is not None else "-",
        "target": "yes" if result.evaluations <= seg_evals and len(result.fp32) <= len(seg_set or ids) else "NO",
        "ok": judge_row(result, judge), "kb": out.stat().st_size / 1024, "seconds": seconds,
    })
    if minimum:
        rows[-1]["minimum"] = minimum_row(label, path, inputs, tol, result, work)

    # a judge that disagrees: rounds fewer tensors (fused epilogues), with and without the prior
    variant = Variant(emulator, "fewer", fused=fused_epilogues(graph))
    prof = profile(graph, samples)
    found = priors.run(graph, emulator, View(Oracle(emulator, samples, tol, outputs), PlanSpace.of(graph)), prof,
                        Listener())
    expensive = Oracle(variant, samples, tol, outputs)
    with_prior = search(ids, expensive, order=found.order, start=found.fp32,
                        hooks=Hooks(alternatives=Alternatives(graph, found, View(expensive, PlanSpace.of(graph)),
                                                              Listener())))
    without = search(ids, Oracle(variant, samples, tol, outputs), order=prof.order, suspects=prof.suspects)
    judge = Oracle(variant, samples, tol, outputs)
    seg_evals, seg_set = segment_list(graph, Oracle(variant, samples, tol, outputs))
    rows.append({
        "model": label, "n": len(ids), "atol": tol.atol, "judge": f"fewer ({len(variant.fused)} fused)",
        "ours": f"{with_prior.evaluations}", "ours_k": len(with_prior.fp32),
        "extra": f"prior: {found.evaluations} emulator evals, {len(found.fp32)} nodes"
                 + ("" if with_prior.agreed else f"; +{len(with_prior.added)}/-{len(with_prior.dropped)}"),
        "none": without.evaluations, "none_k": len(without.fp32),
        "seg": seg_evals, "seg_k": len(seg_set) if seg_set is not None else "-",
        "seg_loose": loose(seg_set, judge) if seg_set is not None else "-",
        "target": "yes" if 2 * with_prior.evaluations <= seg_evals else "NO",
        "ok": "/".join(judge_row(r, judge) for r in (with_prior, without)), "kb": None, "seconds": None,
    })
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="", help="comma-separated labels (the part before ' (')")
    parser.add_argument("--minimum", action="store_true", help="also search --minimum on the emulator (issue 36)")
    args = parser.parse_args()
    import onnxruntime

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"onnxruntime {onnxruntime.__version__}; no GPU\n")
    wanted = set(filter(None, args.models.split(",")))
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for label, (which, make) in models().items():
            if wanted and label.split(" (")[0] not in wanted and label not in wanted:
                continue
            rows += bench(label, which, make, Path(work), args.minimum)
            print(json.dumps(rows[-2:], default=str), file=sys.stderr, flush=True)
    print("| model | candidates | atol | judge | evaluations: ours / no prior / SegmentList | set: ours / no prior "
          "/ SegmentList (loose) | target | ours passes & 1-minimal | file KB | also |")
    print("|---|---:|---:|---|---|---|---|---|---:|---|")
    for r in rows:
        kb = f"{r['kb']:.1f}" if r["kb"] is not None else "-"
        print(f"| {r['model']} | {r['n']} | {r['atol']:.3g} | {r['judge']} | {r['ours']} / {r['none']} / {r['seg']} "
              f"| {r['ours_k']} / {r['none_k']} / {r['seg_k']} ({r['seg_loose']}) | {r['target']} | {r['ok']} | {kb} "
              f"| {r['extra']} |")
    least = [r["minimum"] for r in rows if "minimum" in r]
    if least:
        print("\n| --minimum on the emulator | candidates | 1-minimal: set / evaluations | smallest found | proven "
              "| lower bound | evaluations beyond the search (loop) | x search | proven within 3x | contradicted "
              "| seconds |")
        print("|---|---:|---|---:|---|---:|---|---:|---|---|---:|")
        for m in least:
            print(f"| {m['model']} | {m['n']} | {m['k1']} / {m['e1']} | {m['k']} | {m['proven']} | {m['bound']} "
                  f"| {m['extra']} ({m['loop']}) | {m['ratio']:.1f} | {m['target']} | {m['contradicted']} "
                  f"| {m['seconds']:.1f} |")


if __name__ == "__main__":
    main()
