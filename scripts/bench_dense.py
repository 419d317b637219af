#!/usr/bin/env python3
"""Dense cases: evaluations and set sizes against onnxconverter-common's SegmentList, on the emulator and on a
judge that disagrees with it, on real models nobody here wrote. Prints a Markdown table (docs/benchmarks.md).

    python scripts/bench_dense.py [--models a,b,...]
    python scripts/bench_dense.py --smaller 0.5,0.7 [--exhaustive N] [--models a,b,...]

Each model runs at a tolerance of half its all-FP16 max abs error (atol, rtol 0), where many nodes share the
blame (accumulated rounding, not one overflow). Rows:

* ``emulate``: the pipeline's search on the emulate backend (``order``/``suspects`` from the FP32 profile,
  ``reorder`` by measured effect when no suspect prefix passes: one emulator run per candidate, counted apart
  as "ranking runs", not as evaluations; then the bounded step that tries smaller sets, ``strategy/improve.py``)
  against SegmentList on the same emulated oracle.
* ``judge (fewer)``: a runtime that rounds fewer tensors than the emulator (``scripts/judge_emulate_variant.py
  --fewer``: elementwise epilogues fused into the Conv/MatMul before them never round), in process; the same
  counts as ``--backend command`` with that script. With the prior (the emulator's search, then
  ``search(start=...)`` with its alternatives, as the pipeline did before the step), without it
  (``--prior none``: the profile's order, no effect ranking there), and SegmentList on the same judge.

``--smaller F,F`` (issue 41) prints only its own table, per model and per tolerance atol = F x the all-FP16 max abs
error: the 1-minimal search (its set and evaluations), the default answer after the bounded step that tries
smaller sets, SegmentList, ``--minimum`` at its default budget (the smallest set found, what it claims, the
evaluations beyond the 1-minimal search), and the exhaustive check: every set of 1, 2, ... nodes evaluated on a
memo of its own (not counted), up to one node fewer than the smallest set any of them found, while the sets of the
next size keep the total within ``--exhaustive`` (default 10000): where every smaller size was enumerated, the
true minimum is known.

Targets (issue 20): on the emulator, evaluations at most SegmentList's and a set no larger; on the judge with the
prior, at most half of SegmentList's evaluations. Every answer is checked afterwards on a separate memo of its
oracle (it passes; every single removal fails), never counted. "file KB": the override JSON the CLI writes for
the emulate search (``fp16bisect search -o``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
from itertools import combinations
from pathlib import Path
from typing import NamedTuple

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


def smaller_row(label: str, model: SetUp, factor: float, work: Path, exhaustive: int) -> dict:
    """Issue 41 at one tolerance (``factor`` times the all-FP16 error): the default search (the 1-minimal search,
    then the bounded step), SegmentList, ``--minimum`` at its default budget, and the exhaustive check of every
    smaller set on a memo of its own."""
    path, graph, samples, inputs, _ = model
    tol = Tolerance(atol=model.err * factor, rtol=0.0)
    begin = time.perf_counter()
    outcome = search_model(str(path), [str(inputs)], options=SearchOptions(
        tol, "emulate", journal=Journaling(restart=True), output=str(work / f"{path.stem}.smaller.json")))
    step = outcome.overrides.to_json()["search"].get("improvement") or {}
    first = outcome.result.evaluations - step.get("evaluations", 0)  # the 1-minimal search's own
    least = search_model(str(path), [str(inputs)], options=SearchOptions(
        tol, "emulate", strategy=Strategy(minimum=AUTO), journal=Journaling(restart=True),
        output=str(work / f"{path.stem}.minimum.json")))
    claim = least.minimum.to_json() if least.minimum is not None else {}
    emulator, outputs = EmulateBackend(graph), graph.float_output_names()
    seg_evals, seg_set = segment_list(graph, Oracle(emulator, samples, tol, outputs))
    smallest = min(len(outcome.result.fp32), len(least.result.fp32), len(seg_set or graph.candidates))
    return {"model": label, "factor": factor, "atol": tol.atol, "n": len(graph.candidates),
            "k1": step.get("one_minimal", len(outcome.result.fp32)), "e1": first,
            "k": len(outcome.result.fp32), "e": outcome.result.evaluations, "step": step,
            "seg": seg_evals, "seg_k": len(seg_set) if seg_set is not None else "-",
            "min_k": len(least.result.fp32), "min_extra": least.result.evaluations - first, "claim": claim,
            "exhaustive": smaller_sets(graph, Oracle(emulator, samples, tol, outputs), smallest, exhaustive),
            "seconds": time.perf_counter() - begin}


def smaller_sets(graph: Graph, judge: Oracle, below: int, limit: int) -> dict:
    """Every set of 1, 2, ... nodes evaluated (a memo of its own, not counted), up to ``below - 1`` nodes or while
    the sets of the next size keep the total within ``limit``: the sizes enumerated, the evaluations, and the
    first passing set's size (the true minimum when every smaller size was enumerated)."""
    ids = [n.id for n in graph.candidates]
    done, size, found = 0, 0, None
    while size + 1 < below and done + math.comb(len(ids), size + 1) <= limit:
        size += 1
        for plan in combinations(ids, size):
            done += 1
            if judge(frozenset(plan)):
                return {"sizes": size, "evaluations": done, "passing": size}
    return {"sizes": size, "evaluations": done, "passing": found}


def claimed(claim: dict) -> str:
    """What ``search.minimum`` claims, in a few words."""
    if not claim:
        return "-"
    if claim["proven"]:
        return "proven"
    said = f"estimate {claim['estimate']}"
    if claim["contradictions"]:
        said += f" (contradicted {claim['contradictions']}x)"
    return said + (f"; >= {claim['lower_bound']} proven" if claim["smaller_failed"] else "")


class SetUp(NamedTuple):
    """A model as the benchmark runs it: its file, graph, one generated sample (with its FP32 reference), that
    sample saved as an .npz for the CLI path, and the all-FP16 max abs error there."""

    path: Path
    graph: Graph
    samples: list[Sample]
    inputs: Path
    err: float


def setup(which, make, work: Path) -> SetUp:
    """The model (``SetUp``) from its wheel and its sample generator ``make``, the .npz written under ``work``."""
    import real_models as rm

    path = rm.real_model(which)
    graph = Graph.load(path)
    samples = [Sample("generated", make())]
    add_fp32_references(graph, samples)
    got = EmulateBackend(graph).run(frozenset(), samples[0].inputs)
    err = max(float(np.max(np.abs(got[o] - samples[0].reference[o]))) for o in graph.float_output_names())
    inputs = work / f"{path.stem}.npz"
    np.savez(inputs, **samples[0].inputs)
    return SetUp(path, graph, samples, inputs, err)


def bench(label: str, which, make, work: Path) -> list[dict]:
    path, graph, samples, inputs, err = setup(which, make, work)
    emulator = EmulateBackend(graph)
    outputs = graph.float_output_names()
    tol = Tolerance(atol=err / 2, rtol=0.0)
    ids = [n.id for n in graph.candidates]
    rows = []

    # the emulate backend, end to end as the CLI runs it (the override file written as the CLI writes it)
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
    parser.add_argument("--smaller", default="", metavar="F,F",
                        help="issue 41's table at atol = F x the all-FP16 max abs error for each F (e.g. 0.5,0.7)")
    parser.add_argument("--exhaustive", type=int, default=10000, metavar="N",
                        help="with --smaller: enumerate every set of 1, 2, ... nodes while N sets in all suffice")
    args = parser.parse_args()
    smaller = tuple(float(f) for f in args.smaller.split(",") if f)
    import onnxruntime

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"onnxruntime {onnxruntime.__version__}; no GPU\n")
    wanted = set(filter(None, args.models.split(",")))
    rows, found = [], []
    with tempfile.TemporaryDirectory() as work:
        for label, (which, make) in models().items():
            if wanted and label.split(" (")[0] not in wanted and label not in wanted:
                continue
            if smaller:  # issue 41's table alone
                model = setup(which, make, Path(work))
                for f in smaller:
                    found.append(smaller_row(label, model, f, Path(work), args.exhaustive))
                    print(json.dumps(found[-1], default=str), file=sys.stderr, flush=True)
                continue
            rows += bench(label, which, make, Path(work))
            print(json.dumps(rows[-2:], default=str), file=sys.stderr, flush=True)
    if rows:
        print("| model | candidates | atol | judge | evaluations: ours / no prior / SegmentList | set: ours / no prior "
              "/ SegmentList (loose) | target | ours passes & 1-minimal | file KB | also |")
        print("|---|---:|---:|---|---|---|---|---|---:|---|")
    for r in rows:
        kb = f"{r['kb']:.1f}" if r["kb"] is not None else "-"
        print(f"| {r['model']} | {r['n']} | {r['atol']:.3g} | {r['judge']} | {r['ours']} / {r['none']} / {r['seg']} "
              f"| {r['ours_k']} / {r['none_k']} / {r['seg_k']} ({r['seg_loose']}) | {r['target']} | {r['ok']} | {kb} "
              f"| {r['extra']} |")
    if found:
        print("| model | atol (x all-FP16 error) | candidates | 1-minimal: set / evaluations | default (with the step): "
              "set / evaluations | SegmentList: set / evaluations | --minimum: smallest / claim / evaluations beyond "
              "the search | every smaller set: sizes enumerated / evaluations / smallest passing | seconds |")
        print("|---|---|---:|---|---|---|---|---|---:|")
        for m in found:
            ex = m["exhaustive"]
            sizes = "none" if not ex["sizes"] else "1" if ex["sizes"] == 1 else f"1-{ex['sizes']}"
            check = f"{sizes} / {ex['evaluations']} / " + (
                str(ex["passing"]) if ex["passing"] else "none" if ex["sizes"] else "-")
            print(f"| {m['model']} | {m['atol']:.3g} ({m['factor']:g}x) | {m['n']} | {m['k1']} / {m['e1']} "
                  f"| {m['k']} / {m['e']} | {m['seg_k']} / {m['seg']} | {m['min_k']} / {claimed(m['claim'])} / "
                  f"{m['min_extra']} | {check} | {m['seconds']:.0f} |")


if __name__ == "__main__":
    main()
