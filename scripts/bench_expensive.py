#!/usr/bin/env python3
"""Evaluations on an expensive backend with and without the emulator as a prior, against SegmentList.

    python scripts/bench_expensive.py [--quick | --real] [--models a,b,...]

The expensive backend here is an in-process stand-in for a runtime that disagrees with the emulator on
purpose (the issue's part 4): the emulate arithmetic with a different rounding set, as

* ``same``:   the emulator's own arithmetic (a runtime that agrees);
* ``fewer``:  rounds fewer tensors: candidates fused into the Conv/MatMul/Gemm they follow (elementwise
  epilogues: Add, Mul, BatchNormalization, activations) never round, in any plan, as a fused kernel keeps
  them in registers;
* ``more``:   rounds more: the (up to) 3 candidates with the largest measured effect always run in FP16
  whatever the plan (a runtime with no FP32 kernel for them, or that ignores the pin), each kept only while
  all-FP32-but-those still meets the tolerance (so an overflow culprit is never forced).

Per model and variant: the prior (the search on the emulator, its evaluations free of engine builds) then
``search(start=prior's set, order=prior's order)`` on the variant; without the prior, ``search`` on the
variant with the FP32 profile's order (what ``--prior none`` does on a non-emulate backend); and
onnxconverter-common's SegmentList (``scripts/bench_peers.py``) on the same variant. Every result is judged
afterwards (passes, every single removal fails) on a separate memo of the variant, never counted.

Models: the sample models (their tolerance from ``scripts/make_sample_models.py``) and real models from PyPI
wheels (``tests/real_models.py``) at a tolerance of half their all-FP16 max abs error (atol only), on small
inputs. Prints a Markdown table (pasted into docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts"), str(ROOT / "tests")]

from bench_peers import ONNXCONVERTER_OP_BLOCK_LIST, load_known, onnxconverter_greedy  # noqa: E402
from judge_emulate_variant import fused_epilogues, variant_plan  # noqa: E402

from fp16bisect.strategy import prior as priors  # noqa: E402
from fp16bisect.strategy.alternatives import Alternatives  # noqa: E402
from fp16bisect.strategy import ranking  # noqa: E402
from fp16bisect.run.pipeline import Listener  # noqa: E402
from fp16bisect.backends import Backend  # noqa: E402
from fp16bisect.backends.emulate import EmulateBackend  # noqa: E402
from fp16bisect.model.graph import Graph  # noqa: E402
from fp16bisect.model.profile import profile  # noqa: E402
from fp16bisect.model.samples import Sample, add_fp32_references, load_samples  # noqa: E402
from fp16bisect.evaluation.oracle import Oracle  # noqa: E402
from fp16bisect.evaluation.space import PlanSpace, View  # noqa: E402
from fp16bisect.algorithm.search import Hooks, search  # noqa: E402
from fp16bisect.tolerance import Tolerance  # noqa: E402

class Variant(Backend):
    """The emulate arithmetic with another rounding set (``judge_emulate_variant.py``), in process."""

    deterministic = True

    def __init__(self, emulator: EmulateBackend, name: str, fused=frozenset(), forced=frozenset()):
        self.emulator, self.name = emulator, name
        self.fused, self.forced = frozenset(fused), frozenset(forced)

    def run(self, plan, inputs, repeat=0):
        return self.emulator.run(variant_plan(plan, self.fused, self.forced), inputs)


# --------------------------------------------------------------------------- models


def detector_image(h: int, w: int) -> np.ndarray:
    """A white page with dark glyph-like blocks, normalised as PP-OCR and ImageNet models expect."""
    rng = np.random.default_rng(0)
    img = np.full((h, w, 3), 255, np.float32)
    for r in range(8, h - 8, 14):
        for c in range(6, w - 6, 9):
            if rng.random() < 0.7:
                img[r : r + 8, c : c + 5] = rng.integers(0, 60)
    return ((img / 255 - 0.485) / 0.229).transpose(2, 0, 1)[None].astype(np.float32)


def real_models() -> dict:
    import real_models as rm

    def rng():  # each model its own: its inputs do not depend on which models run (--models)
        return np.random.default_rng(0)

    return {
        "PP-OCRv4 det (64x96)": (rm.PP_OCRV4_DET, lambda: {"x": detector_image(64, 96)}),
        "PP-OCRv4 rec (48x64)": (rm.PP_OCRV4_REC, lambda: {"x": rng().random((1, 3, 48, 64), dtype=np.float32)}),
        "nudenet 320n (64x64)": (rm.NUDENET_320N, lambda: {"images": rng().random((1, 3, 64, 64), dtype=np.float32)}),
        "silero-vad seq (4x576)": (rm.SILERO_VAD_SEQ, lambda: {
            "input": (rng().standard_normal((4, 576)) * 0.1).astype(np.float32),
            "h": np.zeros((1, 1, 128), np.float32), "c": np.zeros((1, 1, 128), np.float32)}),
    }


def segment_list(graph: Graph, test) -> tuple[int, frozenset | None]:
    """onnxconverter-common's SegmentList (``scripts/bench_peers.py``) over the graph's nodes, its op block list
    always in FP32: its evaluations and its set (None when nothing passed)."""
    everything = frozenset(n.id for n in graph.candidates)
    nodes = [n for n in sorted(graph.nodes, key=lambda n: n.index) if n.op_type not in ("Loop", "If", "Scan")]
    always = frozenset(n.id for n in graph.candidates if n.op_type in ONNXCONVERTER_OP_BLOCK_LIST)
    found = onnxconverter_greedy([n.id for n in nodes], lambda b: test((b | always) & everything))
    return found.evaluations, None if found.fp32 is None else (found.fp32 | always) & everything


def setup_sample(name: str, spec: dict):
    path = ROOT / "sample_models" / f"{name}.onnx"
    graph = Graph.load(path)
    samples = load_samples(graph, [str(path.with_suffix(".npz"))])
    add_fp32_references(graph, samples)
    return graph, samples, Tolerance(atol=spec.get("atol", 1e-2), rtol=spec.get("rtol", 1e-2))


def setup_real(which, make_inputs):
    import real_models as rm

    graph = Graph.load(rm.real_model(which))
    samples = [Sample("generated", make_inputs())]
    add_fp32_references(graph, samples)
    emulator = EmulateBackend(graph)
    got = emulator.run(frozenset(), samples[0].inputs)
    err = max(float(np.max(np.abs(got[o] - samples[0].reference[o]))) for o in graph.float_output_names())
    return graph, samples, Tolerance(atol=err / 2, rtol=0.0), emulator


# --------------------------------------------------------------------------- one model


def judge_row(result, oracle) -> str:
    if result.status != "found":
        return "-"
    found = frozenset(result.fp32)
    if not oracle(found):
        return "FAILS"
    passing = sum(1 for m in found if oracle(found - {m}))
    said = "" if result.minimal else " (said: not minimal)"
    return ("yes" if not passing else f"passes; {passing} removal(s) pass too") + said


def judges(graph: Graph, emulator: EmulateBackend, samples, tol: Tolerance, outputs, measured) -> list[Variant]:
    """The variants of the module's docstring: same, fewer, and more (the up to 3 candidates of largest measured
    effect forced to FP16, each only while all-FP32-but-those still meets the tolerance), when any qualifies."""
    variants = [Variant(emulator, "same"), Variant(emulator, "fewer", fused=fused_epilogues(graph))]
    everything = frozenset(measured)
    forced = []
    for c in ranking.by_effect(list(measured), measured):
        if len(forced) == 3 or measured[c] <= 0:
            break
        if Oracle(Variant(emulator, "more", forced=forced + [c]), samples, tol, outputs)(everything):
            forced.append(c)
    if forced:
        variants.append(Variant(emulator, "more", forced=forced))
    return variants


def bench_model(label: str, graph: Graph, samples, tol: Tolerance, emulator=None) -> list[dict]:
    emulator = emulator or EmulateBackend(graph)
    outputs = graph.float_output_names()
    ids = [n.id for n in graph.candidates]
    prof = profile(graph, samples)

    # The prior: the pipeline's emulator search (prior.py), measured effects included.
    found = priors.run(graph, emulator, View(Oracle(emulator, samples, tol, outputs), PlanSpace.of(graph)), prof,
                        Listener())
    prior_set, prior_order = list(found.fp32), found.order
    after_prior = dict(found.oracle.memo), list(found.oracle.history)
    measured = ranking.effects(emulator, samples, tol, outputs, ids)  # (the prior measured the same)

    variants = judges(graph, emulator, samples, tol, outputs, measured)

    rows = []
    for variant in variants:
        def oracle():
            return Oracle(variant, samples, tol, outputs)

        found.alternatives = {}  # the emulator as the pipeline leaves it after the prior: alternatives cost afresh
        emulated = found.oracle.oracle
        emulated.memo, emulated.history = dict(after_prior[0]), list(after_prior[1])
        expensive = oracle()
        with_prior = search(ids, expensive, order=prior_order, start=prior_set, hooks=Hooks(
            alternatives=Alternatives(graph, found, View(expensive, PlanSpace.of(graph)), Listener())))
        without = search(ids, oracle(), order=prof.order, suspects=prof.suspects)
        segment_evaluations, segment_set = segment_list(graph, oracle())
        judge = oracle()

        def size(result):
            return "-" if result.status == "fp32_fails" else len(result.fp32)

        agreement = ("agreed" if with_prior.agreed else
                     f"+{len(with_prior.added)} / -{len(with_prior.dropped)}")
        rows.append({
            "model": label, "variant": variant.name,
            "rounding": {"same": "-", "fewer": f"{len(variant.fused)} fused",
                         "more": f"{len(variant.forced)} forced FP16"}[variant.name],
            "prior_evals": found.evaluations, "prior_k": len(prior_set), "prior_s": found.seconds,
            "alternatives": found.alternatives,
            "k": size(with_prior), "with": with_prior.evaluations, "without": without.evaluations,
            "without_k": size(without), "segment": segment_evaluations,
            "segment_k": "-" if segment_set is None else len(segment_set), "agreement": agreement,
            "ok": "/".join(judge_row(r, judge) for r in (with_prior, without)),
        })
    return rows


def judge_command(variant: Variant) -> str:
    """The same variant as a ``--backend command`` judge (scripts/judge_emulate_variant.py)."""
    cmd = (f"{sys.executable} {ROOT / 'scripts' / 'judge_emulate_variant.py'} {{original}} {{overrides}} "
           f"{{inputs}} {{outputs}}")
    if variant.fused:
        cmd += " --fewer"
    if variant.forced:
        cmd += " --more " + ",".join(sorted(variant.forced))
    return cmd


def bench_command(name: str, spec: dict, work: Path) -> list[dict]:
    """The pipeline end to end through ``--backend command`` (one judge process per evaluation), with and
    without the prior, on a sample model; the variants as in ``bench_model``."""
    from fp16bisect.run.options import Journaling, Judge, SearchOptions, Strategy
    from fp16bisect.run.pipeline import search_model

    path = ROOT / "sample_models" / f"{name}.onnx"
    graph, samples, tol = setup_sample(name, spec)
    emulator = EmulateBackend(graph)
    outputs = graph.float_output_names()
    ids = [n.id for n in graph.candidates]
    prof = profile(graph, samples)
    found = priors.run(graph, emulator, View(Oracle(emulator, samples, tol, outputs), PlanSpace.of(graph)), prof,
                        Listener())
    measured = ranking.effects(emulator, samples, tol, outputs, ids)
    variants = judges(graph, emulator, samples, tol, outputs, measured)
    rows = []
    for variant in variants:
        runs = {}
        for prior in ("auto", "none"):
            out = work / f"{name}-{variant.name}-{prior}.json"
            options = SearchOptions(tol, Judge("command", check=judge_command(variant)), output=str(out),
                                    strategy=Strategy(prior=prior), journal=Journaling(restart=True))
            runs[prior] = search_model(str(path), [str(path.with_suffix(".npz"))], options=options)
        with_prior, without = runs["auto"].result, runs["none"].result
        rows.append({"model": name, "variant": variant.name, "evals": f"{with_prior.evaluations} / {without.evaluations}",
                     "sets": f"{len(with_prior.fp32)} / {len(without.fp32)}",
                     "agreement": "agreed" if with_prior.agreed else
                     f"+{len(with_prior.added)} / -{len(with_prior.dropped)}",
                     "prior": f"{found.evaluations}, {len(found.fp32)}"})
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def table(rows: list[dict]) -> list[str]:
    lines = [
        "| model | expensive backend | emulator: evals, set | k (prior) | expensive evals: prior / no prior / "
        "SegmentList | prior ≤ ½ SegmentList | set sizes: prior / no prior / SegmentList | agreement "
        "| passes & 1-minimal (prior/no prior) | emulator s |",
        "|---|---|---|---:|---|---|---|---|---|---:|",
    ]
    for r in rows:
        half = "yes" if r["with"] <= r["segment"] / 2 else "NO"
        alt = r["alternatives"]
        seconds = f"{r['prior_s']:.1f}" + (f" + {alt['seconds']:.1f}" if alt else "")  # the prior, its alternatives
        alt = (f"; alternatives: {alt['found']} made for {alt['members']} members in {alt['rounds']} round(s), "
               f"{alt['evaluations']} evals" if alt else "")
        lines.append(
            f"| {r['model']} | {r['variant']} ({r['rounding']}) | {r['prior_evals']}, {r['prior_k']}{alt} "
            f"| {r['k']} | {r['with']} / {r['without']} / {r['segment']} | {half} "
            f"| {r['k']} / {r['without_k']} / {r['segment_k']} | {r['agreement']} | {r['ok']} | {seconds} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sample models only")
    parser.add_argument("--real", action="store_true", help="real models only")
    parser.add_argument("--models", default="", help="comma-separated names to run (default: all)")
    parser.add_argument("--command", action="store_true",
                        help="instead: the sample models end to end through --backend command and "
                             "scripts/judge_emulate_variant.py (one process per evaluation)")
    args = parser.parse_args()
    import onnxruntime

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"onnxruntime {onnxruntime.__version__}; expensive backends: emulate variants (CPU), "
          + ("--backend command, scripts/judge_emulate_variant.py\n" if args.command else "in process\n"))
    wanted = set(filter(None, args.models.split(",")))
    if args.command:
        import tempfile

        rows = []
        with tempfile.TemporaryDirectory() as work:
            for name, spec in load_known().items():
                if name != "fp16_safe" and (not wanted or name in wanted):
                    rows += bench_command(name, spec, Path(work))
        print("| model | judge (--backend command) | emulator: evals, set | command evals: prior / no prior "
              "| set sizes: prior / no prior | agreement |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['model']} | {r['variant']} | {r['prior']} | {r['evals']} | {r['sets']} | {r['agreement']} |")
        return
    rows = []
    for name, spec in load_known().items():
        if name == "fp16_safe" or args.real or (wanted and name not in wanted):
            continue
        rows += bench_model(name, *setup_sample(name, spec))
        print("\n".join(table(rows[-1:])[2:]), file=sys.stderr, flush=True)
    if not args.quick:
        for label, (which, make) in real_models().items():
            if wanted and label.split(" (")[0] not in wanted:
                continue
            rows += bench_model(label, *setup_real(which, make))
            print("\n".join(table(rows[-3:])[2:]), file=sys.stderr, flush=True)
    print("\n".join(table(rows)))


if __name__ == "__main__":
    main()
