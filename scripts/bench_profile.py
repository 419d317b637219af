#!/usr/bin/env python3
"""Benchmark the FP32 activation profile (what ``scan``, ``search`` and ``check --report`` run first) against one
plain FP32 run of the same model in ONNX Runtime, on real models (PP-OCRv4 det and rec from a PyPI wheel, and a
transformer export), with and without the accumulators it measures (``model/accumulators.py``).

    python scripts/bench_profile.py [--repeats 3] [--code DIR] [--det-shape 1x3x736x1184] [--rec-shape 1x3x48x320]
                                    [--transformer MODEL.onnx]

``--transformer``: an export of ``scripts/export_hf.py`` (its inputs from the ``.npz`` beside it; default
``~/.cache/fp16bisect/exports/bert_base.onnx`` when it exists). "profile, no acc." is the profile with
``accumulators=False``, today's measurement alone: the accumulators' cost is "profile" against it (target: within
1.5x in time and memory).

Each measurement runs in a fresh Python process (so peak memory is that process's alone, read with
``resource.getrusage(RUSAGE_SELF).ru_maxrss`` at its end); time is the median over ``--repeats`` processes, the
peak RSS the median too. "plain" loads the model, makes one ONNX Runtime session (the options every fp16bisect
session uses) and runs it once; "profile" loads the model and runs ``fp16bisect.model.profile.profile`` on one
sample, session creation included; the plain and profile processes alternate, so that both see the same load
on a shared machine. ``--code DIR`` imports fp16bisect from DIR (for example an older commit
unpacked with ``git archive COMMIT | tar -x -C DIR``) instead of this checkout, even when this checkout is
installed with ``pip install -e`` (each child checks which fp16bisect it imported).

Target (benchmarked here, never asserted in tests): the profile within 3x of the plain run, in time and in peak
memory.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TRANSFORMER = Path.home() / ".cache" / "fp16bisect" / "exports" / "bert_base.onnx"

CHILD = r"""
import json, resource, sys, time
code = sys.argv[4]
sys.path.insert(0, code)
sys.meta_path[:] = [f for f in sys.meta_path if not type(f).__module__.startswith("__editable__")]  # pip -e
import fp16bisect
assert fp16bisect.__file__.startswith(code), (fp16bisect.__file__, code)
import numpy as np
from fp16bisect.model.graph import Graph
from fp16bisect.model.samples import Sample
model, mode = sys.argv[1], sys.argv[3]
shape = [] if sys.argv[2].endswith(".npz") else [int(d) for d in sys.argv[2].split("x")]
graph = Graph.load(model)
if sys.argv[2].endswith(".npz"):
    feed = dict(np.load(sys.argv[2]))
else:
    x = np.random.default_rng(0).uniform(-1, 1, size=shape).astype(np.float32)
    feed = {graph.model.graph.input[0].name: x}
start = time.perf_counter()
if mode == "plain":
    from fp16bisect.model.runtime import session
    sess = session(graph.runnable_copy())
    sess.run(None, feed)
elif mode == "profile":
    from fp16bisect.model.profile import profile
    prof = profile(graph, [Sample("bench", feed)])
else:
    from fp16bisect.model.profile import profile
    prof = profile(graph, [Sample("bench", feed)], accumulators=False)
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def measure(code: Path, model: Path, shape: str, repeats: int) -> dict[str, tuple[float, float]]:
    """Median seconds and peak RSS MB of "plain", "profile-off" (no accumulators) and "profile", their processes
    alternated (plain, profile-off, profile, plain, ...) so that all see the same load on a shared machine."""
    runs: dict[str, list] = {"plain": [], "profile-off": [], "profile": []}
    for _ in range(repeats):
        for mode in runs:
            done = subprocess.run([sys.executable, "-c", CHILD, str(model), shape, mode, str(code.resolve())],
                                  cwd=code, check=True, capture_output=True, text=True)
            runs[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {mode: (statistics.median(r["seconds"] for r in rs), statistics.median(r["peak_mb"] for r in rs))
            for mode, rs in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="processes per median (default 3)")
    parser.add_argument("--code", type=Path, default=ROOT, help="import fp16bisect from this folder")
    parser.add_argument("--det-shape", default="1x3x736x1184", help="PP-OCRv4 det input (default 1x3x736x1184)")
    parser.add_argument("--rec-shape", default="1x3x48x320", help="PP-OCRv4 rec input (default 1x3x48x320)")
    parser.add_argument("--transformer", type=Path, default=TRANSFORMER,
                        help="a scripts/export_hf.py export, its inputs in the .npz beside it (default: bert_base's)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    from real_models import PP_OCRV4_DET, PP_OCRV4_REC, real_model

    import onnxruntime

    print(f"machine: {platform.platform()}, {os.cpu_count()} CPU(s), no GPU; onnxruntime {onnxruntime.__version__}; "
          f"fp16bisect from {args.code}; median of {args.repeats} process(es)\n")
    print("| model | input | plain FP32 run s | profile, no acc. s | profile s | acc. ratio | plain peak RSS MB | "
          "profile, no acc. MB | profile MB | acc. ratio |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    models = [(real_model(PP_OCRV4_DET), args.det_shape), (real_model(PP_OCRV4_REC), args.rec_shape)]
    if args.transformer.exists():
        models.append((args.transformer, str(args.transformer.with_suffix(".npz"))))
    else:
        print(f"(no transformer: {args.transformer} does not exist; export one with scripts/export_hf.py)")
    for model, shape in models:
        got = measure(args.code, model, shape, args.repeats)
        (plain_s, plain_mb), (off_s, off_mb), (prof_s, prof_mb) = got["plain"], got["profile-off"], got["profile"]
        print(f"| {model.name} | {Path(shape).name} | {plain_s:.2f} | {off_s:.2f} | {prof_s:.2f} | "
              f"{prof_s / off_s:.2f}x | {plain_mb:.0f} | {off_mb:.0f} | {prof_mb:.0f} | {prof_mb / off_mb:.2f}x |",
              flush=True)


if __name__ == "__main__":
    main()
