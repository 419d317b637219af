#!/usr/bin/env python3
"""TensorRT-RTX build time of the sample models through the Polygraphy adapter, against another checkout's builder.

    python scripts/bench_tensorrt_build.py [--baseline ROOT] [--repeats N]

For each sample model, two plans: all-FP16 and its known culprits in FP32 (``scripts/make_sample_models.py``), each
the mixed-precision file the tensorrt backend builds, strongly typed, default optimisation level. Each repeat is one
fresh interpreter per code base (this one, and ``--baseline ROOT``: a checkout before the adapter, whose
``fp16bisect.backends.tensorrt.engine.EngineBuilder`` built by hand), alternating, so both see the same machine
state; in it one warm-up build, then every (model, plan) built once, its CPU time (``time.process_time``: every
thread of the process) and wall time taken around the parse and build. Prints a Markdown table of the medians.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ["transformer_block", "cnn_batchnorm", "attention_unscaled", "log_underflow", "two_branches", "fp16_safe",
          "accumulation", "loudness"]

CHILD = r"""
import json, sys, time
from pathlib import Path
from fp16bisect.backends.tensorrt import engine, load

files = json.loads(sys.argv[1])
loaded = load.load()
if hasattr(engine, "EngineBuilder"):  # before the adapter: the hand-written builder
    builder = engine.EngineBuilder(loaded)
    def build(path):
        return builder.build(Path(path).read_bytes()).engine
else:
    def build(path):
        return engine.build(loaded, Path(path).read_bytes(), engine.Settings()).engine
build(files[0][2])  # warm-up: libraries, kernels' first load
found = []
for model, plan, path in files:
    cpu, wall = time.process_time(), time.perf_counter()
    size = len(build(path))
    found.append([model, plan, time.process_time() - cpu, time.perf_counter() - wall, size])
print(json.dumps(found))
"""


def plan_files(work: Path) -> list[list[str]]:
    """(model, plan, path of its mixed-precision file) for each model's all-FP16 plan and its culprits' plan."""
    sys.path.insert(0, str(ROOT))
    from fp16bisect.artifacts.mixed import mixed_model
    from fp16bisect.model.graph import Graph
    from fp16bisect.model.weights import inline

    spec = importlib.util.spec_from_file_location("make_sample_models", ROOT / "scripts" / "make_sample_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    files = []
    for name in MODELS:
        graph = Graph.load(ROOT / "sample_models" / f"{name}.onnx")
        for plan, fp32 in (("all-FP16", []), ("culprits FP32", sorted(module.KNOWN[name]["culprits"]))):
            path = work / f"{name}-{len(fp32)}.onnx"
            path.write_bytes(inline(mixed_model(graph, fp32)).SerializeToString())
            files.append([name, plan, str(path)])
    return files


def run(root: Path, files: list) -> list:
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("POLYGRAPHY_USE_TENSORRT_RTX", None)
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(files)], env=env, capture_output=True, text=True,
                          cwd=root)
    if done.returncode != 0:
        raise SystemExit(f"{root}: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="a checkout of fp16bisect to compare with (its root)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    roots = {"adapter": ROOT, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    times: dict = {}
    with tempfile.TemporaryDirectory() as work:
        files = plan_files(Path(work))
        for _ in range(args.repeats):
            for label, root in roots.items():
                for model, plan, cpu, wall, size in run(root, files):
                    times.setdefault((model, plan), {}).setdefault(label, []).append((cpu, wall, size))
    import tensorrt_rtx

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; TensorRT-RTX "
          f"{tensorrt_rtx.__version__} (CPU, builds only); median of {args.repeats} builds, each in its own run\n")
    labels = list(roots)
    print("| model | plan | " + " | ".join(f"{label} CPU s | {label} wall s" for label in labels) + " | engine bytes |")
    print("|---|---|" + "---:|---:|" * len(labels) + "---:|")
    total = {label: [0.0, 0.0] for label in labels}
    for (model, plan), by in times.items():
        cells = []
        for label in labels:
            cpu, wall = (statistics.median(t[i] for t in by[label]) for i in (0, 1))
            total[label][0] += cpu
            total[label][1] += wall
            cells += [f"{cpu:.2f}", f"{wall:.2f}"]
        sizes = sorted({t[2] for label in labels for t in by[label]})
        print(f"| {model} | {plan} | " + " | ".join(cells) + f" | {', '.join(map(str, sizes))} |")
    print("| all | | " + " | ".join(f"**{c:.2f}** | **{w:.2f}**" for c, w in total.values()) + " | |")


if __name__ == "__main__":
    main()
