#!/usr/bin/env python3
"""Benchmark what ``--report`` costs: the same search with and without it, on a 48-sample data set (issue 33).

    python scripts/bench_report.py [--samples 48] [--repeat 3] [--models loudness,transformer_block]

Each row is one fresh ``fp16bisect search`` process (``python -m fp16bisect``), timed from start to exit (Python's
start-up and imports included: what a user waits for) and by the CPU time it used (user + system, ``os.wait4``:
on a machine others share, the wall clock mostly measures them), its peak memory the process's own. The median
of ``--repeat`` processes is shown, with their range, and the ratios of the medians with ``--report`` to those
without. Models:

- ``loudness`` (``scripts/make_sample_models.py``) on 48 frames of 65536 samples, one in twelve loud, as
  ``scripts/bench_coverage.py`` writes them;
- ``loudness_long``: the same with frames 16 times longer (1,048,576 samples): a search of a few seconds, as
  the one the issue measured (3.5 s, 28 s with ``--report``);
- ``transformer_block`` (``sample_models/``) on 48 samples: its sample's input scaled by 0.90 to 1.10;
- ``ppocr_det``: PP-OCRv4's text detector (a real model from a PyPI wheel, ``tests/real_models.py``, 329
  candidates) on 48 page-like images of 64x96 (``scripts/bench_expensive.py``'s), each shifted in brightness.

The two sample models search in under a second: there a fixed cost decides the ratio. Until 2026-11-27 the
report drew its plots with Matplotlib (importing it 0.4 s, drawing 0.2-0.3 s: 2.2-2.3x on these rows); they are
SVG written by fp16bisect now (``report/plots/svg.py``, about 10 ms for the four). The per-node errors run on at
most 8 most stressing samples (plus each output's worst), in float32 one large tensor at a time
(``tolerance.tensor_errors``), so on a model whose runs cost, the report costs about the same whatever the data
set's size.

Target: with ``--report`` the command costs at most 1.5x the search without it.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_RATIO = 1.5


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_case(model: str, folder: Path, count: int) -> tuple[Path, Path]:
    """The model and a folder of ``count`` samples for it."""
    import numpy as np

    samples = folder / "samples"
    samples.mkdir()
    if model in ("loudness", "loudness_long"):
        path, frames = _script("bench_coverage").write_case(folder, 1 << (20 if model == "loudness_long" else 16), count)
        for frame in frames:
            frame.rename(samples / frame.name)
        return path, samples
    if model == "ppocr_det":
        sys.path.insert(0, str(ROOT / "tests"))
        import real_models

        image = _script("bench_expensive").detector_image(64, 96)
        for i, shift in enumerate(np.linspace(-0.2, 0.2, count)):
            np.savez(samples / f"sample_{i:03d}.npz", x=(image + shift).astype(np.float32))
        return real_models.real_model(real_models.PP_OCRV4_DET), samples
    path = ROOT / "sample_models" / f"{model}.onnx"
    data = np.load(ROOT / "sample_models" / f"{model}.npz")
    for i, scale in enumerate(np.linspace(0.9, 1.1, count)):
        np.savez(samples / f"sample_{i:03d}.npz", **{k: (data[k] * scale).astype(data[k].dtype) for k in data.files})
    return path, samples


def one_process(argv: list[str], cwd: Path) -> tuple[float, float, float]:
    """Seconds from start to exit, CPU seconds and peak memory (MB) of one ``fp16bisect`` process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "fp16bisect", *argv], cwd=cwd, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    err = child.stderr.read().decode() if child.stderr else ""
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"fp16bisect {' '.join(argv)} exited {child.returncode}: {err[-2000:]}")
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def rows_for(model: str, count: int, repeat: int) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="fp16bisect-bench-report-") as tmp:
        folder = Path(tmp)
        path, samples = write_case(model, folder, count)
        base = ["search", str(path), "--inputs", str(samples), "-o", str(folder / "o.json"), "-q"]
        rows = []
        for label, extra in (("search", []), ("search --report", ["--report", str(folder / "r.html")])):
            runs = [one_process(base + extra, folder) for _ in range(repeat)]
            seconds, cpu = [s for s, _, _ in runs], [c for _, c, _ in runs]
            rows.append({"model": model, "n": count, "row": label, "seconds": statistics.median(seconds),
                         "low": min(seconds), "high": max(seconds), "cpu": statistics.median(cpu),
                         "cpu_low": min(cpu), "cpu_high": max(cpu), "mb": max(m for _, _, m in runs)})
        return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=48, help="samples in the data set (default 48)")
    parser.add_argument("--repeat", type=int, default=3, help="processes per row; the median is shown (default 3)")
    parser.add_argument("--models", default="loudness,loudness_long,transformer_block,ppocr_det",
                        help="comma-separated (default: all four)")
    args = parser.parse_args(argv)
    print(f"{args.samples} samples, emulate backend; one fresh process per run, median of {args.repeat} "
          "(min..max); peak memory: the largest of the runs\n")
    print("| model | command | seconds (min..max) | CPU seconds (min..max) | peak memory (MB) | ratio: seconds | "
          "ratio: CPU |")
    print("|---|---|---:|---:|---:|---:|---:|")
    worst = 0.0
    for model in args.models.split(","):
        search, report = rows_for(model, args.samples, args.repeat)
        worst = max(worst, report["seconds"] / search["seconds"], report["cpu"] / search["cpu"])
        for r in (search, report):
            print(f"| {model} | `{r['row']}` | {r['seconds']:.2f} ({r['low']:.2f}..{r['high']:.2f}) | "
                  f"{r['cpu']:.2f} ({r['cpu_low']:.2f}..{r['cpu_high']:.2f}) | {r['mb']:.0f} | "
                  f"{r['seconds'] / search['seconds']:.2f}x | {r['cpu'] / search['cpu']:.2f}x |")
    met = "met" if worst <= TARGET_RATIO else f"MISSED ({worst:.2f}x at worst)"
    print(f"\ntarget: --report costs at most {TARGET_RATIO:g}x the search: {met}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
