#!/usr/bin/env python3
"""Benchmark the FP32 activation profile (what ``scan``, ``search`` and ``check --report`` run first) against one
plain FP32 run of the same model in ONNX Runtime, and the emulation with and without ``--accumulate fp16``, on real
models (PP-OCRv4 det and rec from a PyPI wheel, and a transformer export).

    python scripts/bench_profile.py [--repeats 3] [--code DIR] [--det-shape 1x3x736x1184] [--rec-shape 1x3x48x320]
                                    [--transformer MODEL.onnx] [--evaluations 3] [--tables profile,emulate]

``--transformer``: an export of ``scripts/export_hf.py`` (its inputs from the ``.npz`` beside it; default
``~/.cache/fp16bisect/exports/bert_base.onnx`` when it exists). "profile, no acc." is the profile with
``accumulators=False``: the accumulators' cost is "profile" against it.

Each measurement runs in a fresh Python process (so peak memory is that process's alone, read with
``resource.getrusage(RUSAGE_SELF).ru_maxrss`` at its end); CPU seconds are the process's user + system time over
the measured part (``getrusage``, every thread of ONNX Runtime's pool counted), wall seconds beside them. Every
ONNX Runtime session of every mode (the plain run's, the profile's, the emulation's) is made with its thread
pools' spinning off (``session.intra_op.allow_spinning`` and ``session.inter_op.allow_spinning`` "0"): a thread
waiting for work sleeps instead of spinning, so the CPU time counts work, the same way for the plain run and the
profile (with spinning on, a profile of thousands of small nodes burnt CPU waiting, and the ratio said more about
the load than about the work). Each cell is the median over ``--repeats`` processes (default 5), the modes'
processes alternated so that all see the same load on a shared machine (CPU time and peak RSS move far less with
the load than wall time; they still move: report the load average printed with the table).
"plain" loads the model, makes one ONNX Runtime session (the options every fp16bisect session uses) and runs it
once; "profile" loads the model and runs ``fp16bisect.model.profile.profile`` on one sample, session creation
included. The emulation table: ``EmulateBackend`` with ``accumulate`` fp32 (storage) or fp16, its first run of the
all-FP16 plan ("set-up": the emulation, its session and, under fp16 where shape inference is silent, one FP32 run
for the shapes) then ``--evaluations`` more runs of the same plan (the one with every sum in FP16: the costliest),
CPU and wall seconds per evaluation. ``--code DIR`` imports fp16bisect from DIR (for example an older commit
unpacked with ``git archive COMMIT | tar -x -C DIR``) instead of this checkout, even when this checkout is
installed with ``pip install -e`` (each child checks which fp16bisect it imported).

Targets (benchmarked here, never asserted in tests): the profile within 4x of the plain run; ``--accumulate fp16``
within 1.5x the peak memory of the storage emulation and within 2x its time per evaluation.
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
import json, resource, statistics, sys, time
code = sys.argv[4]
sys.path.insert(0, code)
sys.meta_path[:] = [f for f in sys.meta_path if not type(f).__module__.startswith("__editable__")]  # pip -e
import fp16bisect
assert fp16bisect.__file__.startswith(code), (fp16bisect.__file__, code)
import onnxruntime
_made = onnxruntime.InferenceSession.__init__


def quiet(self, model, options=None, *args, **kwargs):
    # every session of the process (the plain run's and the profile's alike) with ONNX Runtime's thread pools
    # not spinning: a waiting thread sleeps, so the CPU time counted is work, not waiting
    options = options or onnxruntime.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    _made(self, model, options, *args, **kwargs)


onnxruntime.InferenceSession.__init__ = quiet
import numpy as np
from fp16bisect.model.graph import Graph
from fp16bisect.model.samples import Sample
model, mode, evaluations = sys.argv[1], sys.argv[3], int(sys.argv[5])
shape = [] if sys.argv[2].endswith(".npz") else [int(d) for d in sys.argv[2].split("x")]
graph = Graph.load(model)
if sys.argv[2].endswith(".npz"):
    feed = dict(np.load(sys.argv[2]))
else:
    x = np.random.default_rng(0).uniform(-1, 1, size=shape).astype(np.float32)
    feed = {graph.model.graph.input[0].name: x}


def clock():
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime, time.perf_counter()


start = clock()
result = {}
if mode == "plain":
    from fp16bisect.model.runtime import session
    sess = session(graph.runnable_copy())
    sess.run(None, feed)
elif mode in ("profile", "profile-off"):
    from fp16bisect.model.profile import profile
    prof = profile(graph, [Sample("bench", feed)], accumulators=mode == "profile")
else:
    from fp16bisect.backends.emulate import EmulateBackend
    backend = EmulateBackend(graph, accumulate=mode.split("-")[1])
    backend.run(frozenset(), feed)
    done = clock()
    result["setup_cpu"], result["setup_wall"] = done[0] - start[0], done[1] - start[1]
    per = []
    for _ in range(evaluations):
        before = clock()
        backend.run(frozenset(), feed)
        after = clock()
        per.append((after[0] - before[0], after[1] - before[1]))
    result["eval_cpu"] = statistics.median(c for c, _ in per)
    result["eval_wall"] = statistics.median(w for _, w in per)
end = clock()
result.update(cpu=end[0] - start[0], wall=end[1] - start[1],
              peak_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
print(json.dumps(result))
"""

PROFILE_MODES = ("plain", "profile-off", "profile")
EMULATE_MODES = ("emulate-fp32", "emulate-fp16")


def measure(code: Path, model: Path, shape: str, repeats: int, modes, evaluations: int = 3) -> dict[str, dict]:
    """Each mode's measures (the median of each over ``repeats`` processes), the modes' processes alternated
    (plain, profile-off, profile, plain, ...) so that all see the same load on a shared machine."""
    runs: dict[str, list] = {mode: [] for mode in modes}
    for _ in range(repeats):
        for mode in runs:
            done = subprocess.run([sys.executable, "-c", CHILD, str(model), shape, mode, str(code.resolve()),
                                   str(evaluations)], cwd=code, check=True, capture_output=True, text=True)
            runs[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {mode: {key: statistics.median(r[key] for r in rs) for key in rs[0]} for mode, rs in runs.items()}


def profile_table(code: Path, models, repeats: int) -> None:
    print("| model | input | plain CPU s | profile, no acc. CPU s | profile CPU s | profile / plain CPU | plain wall s | "
          "profile wall s | profile / plain wall | plain MB | profile, no acc. MB | profile MB |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for model, shape in models:
        got = measure(code, model, shape, repeats, PROFILE_MODES)
        plain, off, prof = (got[m] for m in PROFILE_MODES)
        print(f"| {model.name} | {Path(shape).name} | {plain['cpu']:.2f} | {off['cpu']:.2f} | {prof['cpu']:.2f} | "
              f"{prof['cpu'] / plain['cpu']:.1f}x | {plain['wall']:.2f} | {prof['wall']:.2f} | "
              f"{prof['wall'] / plain['wall']:.1f}x | {plain['peak_mb']:.0f} | {off['peak_mb']:.0f} | "
              f"{prof['peak_mb']:.0f} |", flush=True)


def emulate_table(code: Path, models, repeats: int, evaluations: int) -> None:
    print("| model | input | --accumulate | set-up CPU s | CPU s per evaluation | wall s per evaluation | peak RSS MB | "
          "fp16 / fp32: CPU per evaluation | fp16 / fp32: peak RSS |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for model, shape in models:
        got = measure(code, model, shape, repeats, EMULATE_MODES, evaluations)
        fp32 = got["emulate-fp32"]
        for mode in EMULATE_MODES:
            m = got[mode]
            ratios = "| - | - |" if mode == "emulate-fp32" else \
                f"| {m['eval_cpu'] / fp32['eval_cpu']:.2f}x | {m['peak_mb'] / fp32['peak_mb']:.2f}x |"
            print(f"| {model.name} | {Path(shape).name} | {mode.split('-')[1]} | {m['setup_cpu']:.2f} | "
                  f"{m['eval_cpu']:.2f} | {m['eval_wall']:.2f} | {m['peak_mb']:.0f} {ratios}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--repeats", type=int, default=5, help="processes per median (default 5)")
    parser.add_argument("--code", type=Path, default=ROOT, help="import fp16bisect from this folder")
    parser.add_argument("--det-shape", default="1x3x736x1184", help="PP-OCRv4 det input (default 1x3x736x1184)")
    parser.add_argument("--rec-shape", default="1x3x48x320", help="PP-OCRv4 rec input (default 1x3x48x320)")
    parser.add_argument("--transformer", type=Path, default=TRANSFORMER,
                        help="a scripts/export_hf.py export, its inputs in the .npz beside it (default: bert_base's)")
    parser.add_argument("--evaluations", type=int, default=3, help="emulation runs timed after the first (default 3)")
    parser.add_argument("--tables", default="profile,emulate", help="which tables: profile, emulate or both")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    from real_models import PP_OCRV4_DET, PP_OCRV4_REC, real_model

    import onnxruntime

    print(f"machine: {platform.platform()}, {os.cpu_count()} CPU(s), no GPU; onnxruntime {onnxruntime.__version__}; "
          f"fp16bisect from {args.code}; median of {args.repeats} process(es); load average "
          f"{' '.join(f'{v:.1f}' for v in os.getloadavg())}\n")
    models = [(real_model(PP_OCRV4_DET), args.det_shape), (real_model(PP_OCRV4_REC), args.rec_shape)]
    if args.transformer.exists():
        models.append((args.transformer, str(args.transformer.with_suffix(".npz"))))
    else:
        print(f"(no transformer: {args.transformer} does not exist; export one with scripts/export_hf.py)\n")
    tables = args.tables.split(",")
    if "profile" in tables:
        profile_table(args.code, models, args.repeats)
        print()
    if "emulate" in tables:
        emulate_table(args.code, models, args.repeats, args.evaluations)


if __name__ == "__main__":
    main()
