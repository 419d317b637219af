#!/usr/bin/env python3
"""Side by side: fp16bisect's search against the strategies users would pick instead.

    python scripts/bench_peers.py [--seeds 5] [--quick] [--real]

Every strategy runs in the same process on the same oracle: on each sample model the
emulate backend with the model's tolerance from ``scripts/make_sample_models.py``
(``KNOWN``), and on synthetic oracles ``test = lambda plan: culprits <= plan`` (k culprits
planted at random positions among n candidates). Prints Markdown tables (pasted into
``docs/benchmarks.md``).

The peers, reimplemented over our oracle from their source:

* Polygraphy ``debug precision --mode bisect`` (``polygraphy_bisect``), forward and
  ``--dir reverse``: see ``POLYGRAPHY_SOURCE``.
* onnxconverter-common ``auto_convert_mixed_precision`` (``onnxconverter_greedy``): see
  ``ONNXCONVERTER_SOURCE``.
* ModelOpt AutoCast's classification rule (``autocast_rule``), applied to our FP32
  profile; no search: see ``AUTOCAST_SOURCE``. The benchmark evaluates its set once to
  report pass/fail; AutoCast itself never does. Not run on the synthetic oracles: they
  have no activations to measure, and any made-up "magnitude" would just encode the answer.

``--real`` also runs the installed packages on the sample models (onnxconverter-common's
``auto_convert_mixed_precision`` on ONNX Runtime CPU; ModelOpt AutoCast's own
``NodeClassifier``) and checks what they return on the emulated oracle. The default run
needs only fp16bisect.

Counting: "evaluations" is what the strategy itself runs (a build and run each; the
peers do not memoise, so a repeated plan counts again, as it costs a build in the real
tool; fp16bisect counts distinct plans, preconditions and verification included).
Whether a result passes and whether it is 1-minimal (every single removal fails) is
judged afterwards on a separate memo of the same oracle and never counted.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import math
import os
import platform
import random
import re
import statistics
import sys
import time
from contextlib import redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fp16bisect.algorithm.search import group_testing_bound, search  # noqa: E402

POLYGRAPHY_SOURCE = (
    "NVIDIA/TensorRT tools/Polygraphy/polygraphy/tools/debug/subtool/precision.py "
    "(BisectMarker, BaseMarker.select_layers; commit a892d22)"
)
ONNXCONVERTER_SOURCE = (
    "onnxconverter-common 1.16.0 onnxconverter_common/auto_mixed_precision.py "
    "(auto_convert_mixed_precision, SegmentList, NodeSegment); float16.py (DEFAULT_OP_BLOCK_LIST)"
)
AUTOCAST_SOURCE = (
    "nvidia-modelopt 0.47.0 modelopt/onnx/autocast/convert.py (DEFAULT_DATA_MAX = 512, "
    "DEFAULT_INIT_MAX = np.finfo(np.float16).max), nodeclassifier.py (IORangeRule, InitializerRangeRule), "
    "precisionconverter.py (OP_TYPES_NOT_SUPPORTED_IN_LOW_PRECISION)"
)

# onnxconverter_common/float16.py: op types convert_float_to_float16 always leaves in FP32.
ONNXCONVERTER_OP_BLOCK_LIST = frozenset(
    """
    ArrayFeatureExtractor Binarizer CastMap CategoryMapper DictVectorizer FeatureVectorizer Imputer
    LabelEncoder LinearClassifier LinearRegressor Normalizer OneHotEncoder RandomUniformLike SVMClassifier
    SVMRegressor Scaler TreeEnsembleClassifier TreeEnsembleRegressor ZipMap NonMaxSuppression TopK RoiAlign
    Resize Range CumSum Min Max Upsample
    """.split()
)
# modelopt/onnx/autocast/precisionconverter.py
AUTOCAST_UNSUPPORTED_OPS = frozenset({"Upsample", "NonMaxSuppression", "Celu"})
AUTOCAST_DATA_MAX = 512.0
AUTOCAST_INIT_MAX = 65504.0  # np.finfo(np.float16).max

ONE_SITE = ("transformer_block", "cnn_batchnorm", "attention_unscaled", "log_underflow")


@dataclass
class PeerResult:
    """What a strategy reports. ``fp32`` is None when it reports no configuration at all."""

    fp32: frozenset | None
    evaluations: int
    note: str = ""


class Counted:
    """Counts every call of a test, repeats included (the peers rebuild a plan they already tried)."""

    def __init__(self, test: Callable[[frozenset], bool]):
        self.test = test
        self.calls = 0

    def __call__(self, plan) -> bool:
        self.calls += 1
        return bool(self.test(frozenset(plan)))


# --------------------------------------------------------------------------- the peers


def polygraphy_bisect(layers: Sequence, test: Callable[[frozenset], bool], direction: str = "forward") -> PeerResult:
    """Polygraphy ``debug precision --mode bisect`` over ``layers`` (in network order).

    Follows BisectMarker: the first iteration marks all N layers (``num_layers_to_mark =
    max_layers``), with good = N + 1 ("pretend marking all the layers gives us good
    accuracy") and bad = 0; the all-FP16 network is never tried. A pass sets good = n and
    rounds the next n down, a fail sets bad = n and rounds up; n = round((good + bad) / 2);
    it stops when n repeats, when |good - bad| <= 1, or when n > N. It then tells the user
    to run the first (``forward``) or last (``reverse``) ``good`` layers in higher precision,
    except when good >= N, where it reports "Could not find a configuration that satisfied
    accuracy requirements" (also when all N layers in FP32 pass).
    """
    layers = list(layers)
    total = len(layers)
    counted = Counted(test)

    def select(n: int) -> frozenset:
        return frozenset(layers[:n] if direction == "forward" else layers[total - n :])

    n, good, bad = total, total + 1, 0
    while True:
        success = counted(select(n))
        if success:
            good, round_func = n, math.floor
        else:
            bad, round_func = n, math.ceil
        old, n = n, int(round_func((good + bad) / 2.0))
        if old == n or abs(good - bad) <= 1 or n > total:
            break
    if good > total:
        return PeerResult(None, counted.calls, "no configuration passes")
    if good == total:
        return PeerResult(select(good), counted.calls, "all layers; the tool reports no configuration")
    return PeerResult(select(good), counted.calls, f"{'first' if direction == 'forward' else 'last'} {good}")


def onnxconverter_greedy(nodes: Sequence, test: Callable[[frozenset], bool]) -> PeerResult:
    """onnxconverter-common's ``auto_convert_mixed_precision`` search over ``nodes`` (graph order).

    ``test`` receives the node block list (the nodes kept in FP32). Segments of
    contiguous nodes, first one segment of all; each attempt takes the largest segment
    neither accepted nor rejected (the first of equal ones) and blocks every node outside
    it and outside the accepted segments. Pass: the segment is accepted for good. Fail: a
    segment of one is rejected (stays FP32), a longer one is split into size // 2 and the
    rest. When no segment is left, the final block list is converted and validated once
    more (an evaluation in the real tool); a failure there raises ValueError in the tool.
    The FP32 model is only validated against itself, never run as a plan.
    """
    nodes = list(nodes)
    counted = Counted(test)
    segments = [{"size": len(nodes), "good": False, "bad": False}] if nodes else []

    def blocked(skip=None) -> frozenset:
        out, start = [], 0
        for seg in segments:
            if seg is not skip and not seg["good"]:
                out.extend(nodes[start : start + seg["size"]])
            start += seg["size"]
        return frozenset(out)

    def largest():
        best = None
        for seg in segments:
            if not seg["good"] and not seg["bad"] and (best is None or seg["size"] > best["size"]):
                best = seg
        return best

    while (seg := largest()) is not None:
        if counted(blocked(skip=seg)):
            seg["good"] = True
        elif seg["size"] == 1:
            seg["bad"] = True
        else:
            half = seg["size"] // 2
            at = next(i for i, s in enumerate(segments) if s is seg)
            segments.insert(at + 1, {"size": seg["size"] - half, "good": False, "bad": False})
            seg["size"] = half
    final = blocked()
    if not counted(final):
        return PeerResult(final, counted.calls, "final validation failed (the tool raises ValueError)")
    return PeerResult(final, counted.calls)


def autocast_rule(graph, prof, samples, data_max: float = AUTOCAST_DATA_MAX, init_max: float = AUTOCAST_INIT_MAX):
    """ModelOpt AutoCast's classification: the node ids it keeps in high precision (all nodes, not only candidates).

    A node stays FP32 when any input or output tensor of the FP32 reference run has
    max |x| > ``data_max`` (IORangeRule; Constant nodes exempt; graph inputs count,
    initializers are not reference data), when a float32 initializer it reads has
    |x| > ``init_max`` (InitializerRangeRule), or when its op type has no low-precision
    form (Upsample, NonMaxSuppression, Celu). Max |x| per float tensor comes from
    fp16bisect's FP32 profile (max over samples, as AutoCast aggregates batches); the
    graph inputs from the samples. Integer tensors (shapes, indices), which AutoCast
    also checks, are not in the profile: this can only keep fewer nodes than AutoCast.
    Not reproduced: AutoCast's graph sanitizer, which fuses decomposed LayerNorms into one
    LayerNormalization node before classifying.
    """
    import numpy as np
    from onnx import numpy_helper

    absmax = {t: s.max_abs for t, s in prof.tensors.items() if not s.initializer}
    for sample in samples:
        for name, array in sample.inputs.items():
            if array.dtype.kind == "f" and array.size:
                absmax[name] = max(absmax.get(name, 0.0), float(np.max(np.abs(array))))
    inits = {t.name: t for t in graph.model.graph.initializer}
    kept = set()
    for node in graph.nodes:
        if node.op_type in AUTOCAST_UNSUPPORTED_OPS:
            kept.add(node.id)
            continue
        for name in node.inputs:
            if name in inits:
                value = numpy_helper.to_array(inits[name])
                if value.dtype == np.float32 and np.any(np.abs(value) > init_max):
                    kept.add(node.id)
        if node.op_type != "Constant" and any(absmax.get(t, 0.0) > data_max for t in (*node.inputs, *node.outputs)):
            kept.add(node.id)
    return frozenset(kept)


# --------------------------------------------------------------------------- judging


def one_minimal(fp32: frozenset, judge: Callable[[frozenset], bool]) -> bool:
    """Every single removal evaluated on the oracle and failing (the set itself must pass)."""
    return all(not judge(fp32 - {m}) for m in fp32)


@dataclass
class Row:
    strategy: str
    evaluations: int | str
    fp32: frozenset | None
    passes: bool
    minimal: bool
    seconds: float
    note: str = ""

    @property
    def size(self) -> int | None:
        return None if self.fp32 is None else len(self.fp32)


def judged(strategy: str, result: PeerResult, judge, seconds: float, evaluations=None) -> Row:
    fp32 = result.fp32
    passes = fp32 is not None and judge(fp32)
    minimal = passes and one_minimal(fp32, judge)
    return Row(strategy, result.evaluations if evaluations is None else evaluations, fp32, passes, minimal,
               seconds, result.note)


# --------------------------------------------------------------------------- sample models


def load_known() -> dict:
    spec = importlib.util.spec_from_file_location("make_sample_models", ROOT / "scripts" / "make_sample_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.KNOWN


def setup_model(name: str, known: dict):
    """Graph, samples, one emulate backend and a fresh-oracle factory (each strategy gets its own memo)."""
    from fp16bisect.backends.emulate import EmulateBackend
    from fp16bisect.model.graph import Graph
    from fp16bisect.evaluation.oracle import Oracle
    from fp16bisect.model.samples import add_fp32_references, load_samples
    from fp16bisect.tolerance import Tolerance

    path = ROOT / "sample_models" / f"{name}.onnx"
    graph = Graph.load(path)
    samples = load_samples(graph, [str(path.with_suffix(".npz"))])
    add_fp32_references(graph, samples)
    tol = Tolerance(atol=known.get("atol", 1e-2), rtol=known.get("rtol", 1e-2))
    backend = EmulateBackend(graph)

    def oracle():
        return Oracle(backend, samples, tol, graph.float_output_names())

    return graph, samples, oracle


def run_model(name: str, known: dict) -> list[Row]:
    from fp16bisect.model.profile import profile

    graph, samples, oracle = setup_model(name, known)
    candidates = [n.id for n in graph.candidates]
    is_candidate = set(candidates)
    judge = oracle()
    rows = []

    # Polygraphy: one layer per candidate, in topological order (see docs/benchmarks.md).
    for direction in ("forward", "reverse"):
        test = oracle()
        start = time.perf_counter()
        result = polygraphy_bisect(candidates, test, direction)
        rows.append(judged(f"Polygraphy bisect, {direction}", result, judge, time.perf_counter() - start))

    # Polygraphy over the layers of a real TensorRT network (TensorRT-RTX's ONNX parser), when it is installed.
    layers = trt_layer_nodes(graph)
    if layers is not None:
        test = oracle()
        start = time.perf_counter()
        result = polygraphy_bisect(range(len(layers)), lambda marked: test(frozenset().union(*(layers[i] for i in marked))))
        seconds = time.perf_counter() - start
        if result.fp32 is not None:
            result.fp32 = frozenset().union(*(layers[i] for i in result.fp32))
        result.note = f"{len(layers)} layers; " + result.note
        rows.append(judged("Polygraphy bisect, forward, TensorRT-RTX layers", result, judge, seconds))

    # onnxconverter-common: every node of the graph in file order (Loop/If/Scan left out, as the tool does);
    # a blocked non-candidate changes nothing in the emulation; its default op block list always stays FP32.
    nodes = [n for n in sorted(graph.nodes, key=lambda n: n.index) if n.op_type not in ("Loop", "If", "Scan")]
    always = frozenset(n.id for n in graph.candidates if n.op_type in ONNXCONVERTER_OP_BLOCK_LIST)
    test = oracle()
    start = time.perf_counter()
    result = onnxconverter_greedy([n.id for n in nodes], lambda blocked: test((blocked | always) & is_candidate))
    seconds = time.perf_counter() - start
    result.fp32 = (result.fp32 | always) & is_candidate
    rows.append(judged("onnxconverter-common greedy", result, judge, seconds))

    # fp16bisect and AutoCast share the FP32 profile; each row's time includes it.
    start = time.perf_counter()
    prof = profile(graph, samples)
    profile_seconds = time.perf_counter() - start

    start = time.perf_counter()
    kept = autocast_rule(graph, prof, samples)
    seconds = profile_seconds + time.perf_counter() - start
    extra = len(kept - is_candidate)
    note = "never checks the result" + (f"; also {extra} non-candidate node(s)" if extra else "")
    rows.append(judged("ModelOpt AutoCast rule", PeerResult(kept & is_candidate, 0, note), judge, seconds,
                       evaluations="0 (+1 FP32 run)"))

    test = oracle()
    start = time.perf_counter()
    found = search(candidates, test, order=prof.order, suspects=prof.suspects)
    seconds = profile_seconds + time.perf_counter() - start
    fp32 = frozenset(found.fp32) if found.status != "fp32_fails" else None
    rows.append(judged("fp16bisect", PeerResult(fp32, found.evaluations, f"{prof.suspects} suspect(s)"), judge,
                       seconds))
    return rows


def trt_layer_nodes(graph) -> list[frozenset] | None:
    """The candidate ids of each layer of the network TensorRT-RTX's ONNX parser makes, in network order.

    A layer belongs to the node its metadata names (``[ONNX Layer: <node>]``; an unnamed node
    is ``node_of_<first output>``); helper layers (weights constants, their reshapes) belong to
    none, yet count in Polygraphy's N as they do in the real tool. A node whose name is shared
    maps to every node of that name. None when TensorRT-RTX is not installed.
    """
    try:
        import tensorrt_rtx as trt
    except ImportError:
        return None
    from fp16bisect.backends.tensorrt.pin import metadata_nodes

    by_name: dict[str, set] = {}
    for node in graph.candidates:
        if node.name:
            by_name.setdefault(node.name, set()).add(node.id)
        by_name.setdefault(f"node_of_{node.outputs[0]}", set()).add(node.id)
    logger = trt.Logger(trt.Logger.ERROR)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(graph.model.SerializeToString()):
        return None
    found = []
    for i in range(network.num_layers):
        name = next(iter(metadata_nodes(network.get_layer(i).metadata)), None)
        found.append(frozenset(by_name.get(name, ())) if name else frozenset())
    return found


def names(fp32: frozenset | None, limit: int = 4) -> str:
    if fp32 is None:
        return "(none found)"
    if not fp32:
        return "0"
    shown = sorted(fp32)
    text = ", ".join(shown[:limit]) + (", ..." if len(shown) > limit else "")
    return f"{len(fp32)}: {text}"


def sample_tables(known: dict) -> tuple[list[str], list[str], dict]:
    detail = [
        "| model | strategy | evaluations | FP32 set | passes | 1-minimal | seconds | note |",
        "|---|---|---:|---|---|---|---:|---|",
    ]
    ratios = [
        "| model | fp16bisect set | smallest passing peer set | no larger | fp16bisect evals "
        "| Polygraphy fwd evals (N = candidates) | ratio | fewer | Polygraphy fwd evals (N = TensorRT-RTX layers) "
        "| ratio | fewer |",
        "|---|---:|---:|---|---:|---:|---:|---|---:|---:|---|",
    ]
    summary = {"size_ok": [], "evals": []}
    for name, spec in known.items():
        rows = run_model(name, spec)
        for r in rows:
            detail.append(
                f"| {name} | {r.strategy} | {r.evaluations} | {names(r.fp32)} | {'yes' if r.passes else 'NO'} "
                f"| {'yes' if r.minimal else 'no'} | {r.seconds:.3f} | {r.note} |"
            )
        by = {r.strategy: r for r in rows}
        ours = by["fp16bisect"]
        peers = [r for r in rows if r is not ours and r.passes]
        smallest = min((r.size for r in peers), default=None)
        size_ok = ours.passes and (smallest is None or ours.size <= smallest)
        summary["size_ok"].append((name, size_ok))
        one_site = name in ONE_SITE
        cells = []
        polys = []
        for label in ("Polygraphy bisect, forward", "Polygraphy bisect, forward, TensorRT-RTX layers"):
            poly = by.get(label)
            if poly is None:
                cells += ["-", "-", "-"]
                polys.append(None)
                continue
            polys.append(poly.evaluations)
            fewer = ("yes" if ours.evaluations < poly.evaluations else "NO") if one_site else "(not one-site)"
            cells += [str(poly.evaluations), f"{ours.evaluations / poly.evaluations:.2f}", fewer]
        if one_site:
            summary["evals"].append((name, ours.evaluations, *polys))
        ratios.append(
            f"| {name} | {ours.size} | {'-' if smallest is None else smallest} | {'yes' if size_ok else 'NO'} "
            f"| {ours.evaluations} | {' | '.join(cells)} |"
        )
    return detail, ratios, summary


# --------------------------------------------------------------------------- synthetic oracles


def synthetic_table(sizes, ks, seeds: int) -> tuple[list[str], list]:
    rows = [
        "| n | k | strategy | evaluations mean | max | log2 C(n,k) | max / log2 C(n,k) | FP32 set mean "
        "| passes | 1-minimal | ms mean |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---|---|---:|",
    ]
    checks = []
    strategies = {
        "Polygraphy bisect, forward": lambda ids, t: polygraphy_bisect(ids, t, "forward"),
        "Polygraphy bisect, reverse": lambda ids, t: polygraphy_bisect(ids, t, "reverse"),
        "onnxconverter-common greedy": onnxconverter_greedy,
        "fp16bisect": _fp16bisect_plain,
    }
    for n in sizes:
        for k in ks:
            lower = group_testing_bound(n, k)
            per = {s: [] for s in strategies}
            for seed in range(seeds):
                rng = random.Random(f"{n}-{k}-{seed}")
                ids = list(range(n))  # the graph order every strategy sees
                culprits = frozenset(rng.sample(ids, k))

                def judge(plan, culprits=culprits):
                    return culprits <= plan

                for label, strategy in strategies.items():
                    start = time.perf_counter()
                    result = strategy(ids, judge)
                    seconds = time.perf_counter() - start
                    per[label].append(judged(label, result, judge, seconds))
            for label, got in per.items():
                evals = [r.evaluations for r in got]
                sizes_found = [r.size for r in got if r.size is not None]
                ratio = max(evals) / lower
                rows.append(
                    f"| {n} | {k} | {label} | {statistics.mean(evals):.1f} | {max(evals)} | {lower:.1f} "
                    f"| {ratio:.2f} | {statistics.mean(sizes_found):.1f} "
                    f"| {sum(r.passes for r in got)}/{len(got)} | {sum(r.minimal for r in got)}/{len(got)} "
                    f"| {1000 * statistics.mean(r.seconds for r in got):.2f} |"
                )
                if label == "fp16bisect":
                    checks.append((n, k, max(evals), lower, ratio))
    return rows, checks


def _fp16bisect_plain(ids, test) -> PeerResult:
    """fp16bisect with no profile: the graph order as the order, no suspects."""
    found = search(ids, test)
    return PeerResult(frozenset(found.fp32), found.evaluations)


# --------------------------------------------------------------------------- the real packages (--real)


def real_onnxconverter(known: dict) -> list[str]:
    """onnxconverter-common's own auto_convert_mixed_precision on ONNX Runtime CPU, then our emulated check."""
    import numpy as np
    import onnx
    import onnxconverter_common
    from onnxconverter_common.auto_mixed_precision import auto_convert_mixed_precision

    from fp16bisect.model.runtime import session

    rows = [
        f"onnxconverter-common {onnxconverter_common.__version__}: "
        "`auto_convert_mixed_precision(model, feed, rtol=R, atol=A, keep_io_types=True)`, ONNX Runtime CPU\n",
        "| model | attempts (+ final) | what it returns | its model on ORT CPU: max abs err vs FP32 "
        "| same set on the emulated oracle | emulated all-FP16 |",
        "|---|---:|---|---:|---|---|",
    ]
    for name, spec in known.items():
        graph, samples, oracle = setup_model(name, spec)
        judge = oracle()
        model = onnx.load(str(ROOT / "sample_models" / f"{name}.onnx"))
        feed = dict(samples[0].inputs)
        out = io.StringIO()
        try:
            with redirect_stdout(out):
                converted = auto_convert_mixed_precision(
                    model, feed, rtol=spec.get("rtol", 1e-2), atol=spec.get("atol", 1e-2), keep_io_types=True
                )
        except Exception as exc:  # report what the tool says, whatever it is
            rows.append(f"| {name} | - | raised {type(exc).__name__}: {str(exc).splitlines()[0][:80]} | - | - | - |")
            continue
        log = out.getvalue()
        attempts = log.count("Running attempt")
        done = re.search(r"^Done: (\[.*\])$", log, re.M)
        blocked = set(eval(done.group(1), {})) if done else set()  # a printed list of node-name strings
        plan = frozenset(
            n.id for n in graph.candidates if n.name in blocked or n.op_type in ONNXCONVERTER_OP_BLOCK_LIST
        )
        sess = session(converted, "the converted model")
        got = sess.run([o.name for o in graph.outputs], feed)
        err = max(
            float(np.max(np.abs(g.astype(np.float32) - samples[0].reference[o.name])))
            for g, o in zip(got, graph.outputs)
        )
        fp16 = judge(frozenset())
        kept = "everything in FP16" if not blocked else f"{len(plan)} candidate(s) FP32 ({len(blocked)} name(s) blocked)"
        rows.append(
            f"| {name} | {attempts} (+1) | success, {kept} | {err:.3g} | {'passes' if judge(plan) else 'FAILS'} "
            f"| {'passes' if fp16 else 'fails'} |"
        )
    return rows


def _modelopt_classifier():
    """ModelOpt's NodeClassifier module, loaded without ``modelopt/onnx/__init__.py``, which imports torch.

The full ``convert_to_mixed_precision`` cannot run without torch; the classifier, the part that
decides which nodes stay FP32, needs only onnx and numpy.
"""
    import importlib.metadata
    import types

    dist = importlib.metadata.distribution("nvidia-modelopt")
    base = Path(dist.locate_file("modelopt"))
    for pkg, sub in (("modelopt", ""), ("modelopt.onnx", "onnx"), ("modelopt.onnx.autocast", "onnx/autocast")):
        if pkg not in sys.modules:
            module = types.ModuleType(pkg)
            module.__path__ = [str(base / sub)]
            sys.modules[pkg] = module
    # IORangeRule imports referencerunner.TensorStats (multi-batch statistics) lazily, and referencerunner
    # imports the quantization package (torch). We pass raw arrays, for which that isinstance check is False.
    if "modelopt.onnx.autocast.referencerunner" not in sys.modules:
        runner = types.ModuleType("modelopt.onnx.autocast.referencerunner")
        runner.TensorStats = type("TensorStats", (), {})
        sys.modules[runner.__name__] = runner
    import logging

    from modelopt.onnx.autocast import nodeclassifier  # noqa: E402

    logging.getLogger("autocast").setLevel(logging.ERROR)
    for handler in logging.getLogger().handlers:
        handler.setLevel(logging.ERROR)
    return dist.version, nodeclassifier


def real_autocast(known: dict) -> list[str]:
    """ModelOpt AutoCast's own NodeClassifier on ONNX Runtime FP32 reference data of every tensor."""
    import numpy as np
    import onnx

    from fp16bisect.model.profile import profile
    from fp16bisect.model.runtime import session

    version, nodeclassifier = _modelopt_classifier()
    rows = [
        f"nvidia-modelopt {version}: `NodeClassifier(model, node_to_init_map, initializer_map, data_max=512, "
        "init_max=65504).run(reference)`, reference = every tensor of an ONNX Runtime FP32 run plus the inputs\n",
        "| model | high-precision nodes (ModelOpt) | same as the reimplementation | on the emulated oracle |",
        "|---|---|---|---|",
    ]
    for name, spec in known.items():
        graph, samples, oracle = setup_model(name, spec)
        judge = oracle()
        model = graph.runnable_copy()
        ids = {}
        # AutoCast's sanitizer names unnamed nodes first (modelopt/onnx/utils.py name_onnx_nodes).
        taken = {n.name for n in model.graph.node}
        start_id = len(taken)
        for node in graph.nodes:
            proto = model.graph.node[node.index]
            if not proto.name:
                new = f"{proto.op_type}_{start_id}"
                while new in taken:
                    start_id += 1
                    new = f"{proto.op_type}_{start_id}"
                proto.name = new
                taken.add(new)
            ids.setdefault(proto.name, set()).add(node.id)
        every = [t for n in model.graph.node for t in n.output if t]
        probe = onnx.ModelProto()
        probe.CopyFrom(model)
        declared = {o.name for o in probe.graph.output}
        probe.graph.output.extend(onnx.ValueInfoProto(name=t) for t in every if t not in declared)
        names_out = [o.name for o in probe.graph.output]
        values = session(probe, "the model with every tensor as an output").run(names_out, samples[0].inputs)
        reference = dict(samples[0].inputs)
        reference.update({k: np.asarray(v) for k, v in zip(names_out, values)})
        inits = {t.name: t for t in model.graph.initializer}
        node_to_init = {n.name: [inits[i] for i in n.input if i in inits] for n in model.graph.node}
        classifier = nodeclassifier.NodeClassifier(
            model, node_to_init, inits, data_max=AUTOCAST_DATA_MAX, init_max=AUTOCAST_INIT_MAX
        )
        _, high = classifier.run(reference)
        theirs = frozenset(i for h in high for i in ids.get(h, ()))
        ours = autocast_rule(graph, profile(graph, samples), samples)
        cands = {n.id for n in graph.candidates}
        plan = theirs & frozenset(cands)
        rows.append(
            f"| {name} | {names(theirs)} | {'yes' if theirs == ours else 'no: ours ' + names(ours)} "
            f"| {'passes' if judge(plan) else 'FAILS'} |"
        )
    return rows


def real_peers(known: dict) -> list[str]:
    lines = ["\n## The real packages (--real)\n"]
    for label, run in (("onnxconverter-common", real_onnxconverter), ("ModelOpt AutoCast", real_autocast)):
        try:
            lines += run(known)
        except ImportError as exc:
            lines.append(f"{label}: cannot be imported here ({exc}); skipped")
        lines.append("")
    return lines


# --------------------------------------------------------------------------- main


def versions() -> str:
    import numpy
    import onnx
    import onnxruntime

    from fp16bisect import __version__

    return (
        f"fp16bisect {__version__}, onnxruntime {onnxruntime.__version__}, onnx {onnx.__version__}, "
        f"numpy {numpy.__version__}, Python {platform.python_version()}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="random culprit sets per synthetic (n, k)")
    parser.add_argument("--quick", action="store_true", help="one seed, n = 100 only (smoke run)")
    parser.add_argument("--real", action="store_true", help="also run the installed peer packages for real")
    args = parser.parse_args()
    print(f"machine: {platform.platform()}, {os.cpu_count()} cores; {versions()}")
    print("backend: emulate (ONNX Runtime CPU) for the sample models\n")
    known = load_known()

    print("## Sample models (each model's tolerance from KNOWN)\n")
    detail, ratios, summary = sample_tables(known)
    print("\n".join(detail))
    print("\n### Targets on the sample models\n")
    print("\n".join(ratios))

    sizes, seeds = ((100,), 1) if args.quick else ((100, 1000), args.seeds)
    print(f"\n## Synthetic oracles (k culprits planted at random among n; {seeds} seed(s) each; "
          "AutoCast not run: no activations)\n")
    rows, checks = synthetic_table(sizes, (1, 2, 4), seeds)
    print("\n".join(rows))

    print("\n## Headline\n")
    for name, ok in summary["size_ok"]:
        if not ok:
            print(f"- MISSED: on {name} fp16bisect's set is larger than a peer's passing set")
    ours = sum(e[1] for e in summary["evals"])
    for column, what in ((2, "N = candidates"), (3, "N = TensorRT-RTX network layers")):
        if any(e[column] is None for e in summary["evals"]):
            continue
        poly = sum(e[column] for e in summary["evals"])
        missed = [e[0] for e in summary["evals"] if e[1] >= e[column]]
        print(f"- one-site models: fp16bisect {ours} evaluations in all, Polygraphy's bisect ({what}) {poly}: "
              f"{poly / ours:.2f}x as many" + (f"; not fewer on {', '.join(missed)}" if missed else ""))
    worst = max(checks, key=lambda c: c[4])
    print(f"- synthetic: fp16bisect's worst evaluations / log2 C(n,k) = {worst[4]:.2f} (n={worst[0]}, k={worst[1]}; "
          f"target <= 2: {'met' if worst[4] <= 2 else 'MISSED'})")
    if all(ok for _, ok in summary["size_ok"]):
        print("- every sample model: fp16bisect's set is no larger than any peer's passing set")

    if args.real:
        print("\n".join(real_peers(known)))


if __name__ == "__main__":
    main()
