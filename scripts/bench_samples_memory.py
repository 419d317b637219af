#!/usr/bin/env python3
"""Benchmark the memory of a search over many large samples (issue "Coverage", part 1: samples are read lazily).

    python scripts/bench_samples_memory.py [--sizes 1,200] [--shape 1x3x736x1184] [--atol 0.1]

The model is PP-OCRv4's text detector (from the rapidocr-onnxruntime wheel, cached as the tests cache it). N
samples of random pixels (normalised as PP-OCR does) at ``--shape`` are written as one ``.npz`` each into a
temporary directory (200 at 1x3x736x1184 are 2.0 GB), and ``fp16bisect search MODEL --inputs DIR`` runs in a
fresh process per row, on the emulate backend. Each row reports that process's peak resident memory
(``os.wait4``'s maximum resident set size), its seconds, the evaluations and the input bytes on disk, and
the ratio of its peak to the N = 1 row's (the first sample alone).

Target: the search over 200 samples peaks at most at 2x the memory of the one-sample search.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests")]
TARGET_RATIO = 2.0


def write_samples(folder: Path, count: int, shape: tuple[int, ...]) -> int:
    """``count`` samples ``s000.npz``...; the bytes written."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(count):
        x = (rng.random(shape, dtype=np.float32) - np.float32(0.5)) / np.float32(0.25)
        np.savez(folder / f"s{i:03d}.npz", x=x)
    return sum(p.stat().st_size for p in folder.glob("*.npz"))


def search(model: Path, inputs: Path, out: Path, atol: float) -> dict:
    """``fp16bisect search`` in a fresh process: its own peak memory (MB, from ``os.wait4``), seconds,
    evaluations and FP32 nodes."""
    start = time.perf_counter()
    with open(out.with_suffix(".err"), "w") as err:
        child = subprocess.Popen([sys.executable, "-m", "fp16bisect", "search", str(model), "--inputs", str(inputs),
                                  "--atol", str(atol), "-o", str(out), "-q"], stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    if child.returncode != 0:
        raise SystemExit(f"search failed ({child.returncode}): {out.with_suffix('.err').read_text().strip()}")
    data = json.loads(out.read_text())
    return {"peak_mb": usage.ru_maxrss / 1024, "seconds": seconds, "evaluations": data["search"]["evaluations"],
            "fp32": len(data["fp32_nodes"])}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,200", help="numbers of samples, one row each (default 1,200)")
    parser.add_argument("--shape", default="1x3x736x1184", help="the input shape (default 1x3x736x1184)")
    parser.add_argument("--atol", type=float, default=0.1, help="the search's atol (default 0.1)")
    args = parser.parse_args(argv)
    import real_models as rm

    model = rm.real_model(rm.PP_OCRV4_DET)
    shape = tuple(int(d) for d in args.shape.split("x"))
    sizes = sorted(int(s) for s in args.sizes.split(","))
    rows = []
    with tempfile.TemporaryDirectory(prefix="fp16bisect-bench-memory-") as tmp:
        tmp = Path(tmp)
        largest = tmp / "all"
        size = write_samples(largest, max(sizes), shape)
        for n in sizes:
            folder = tmp / f"n{n}"
            folder.mkdir()
            for name in sorted(p.name for p in largest.iterdir())[:n]:
                (folder / name).symlink_to(largest / name)
            row = search(model, folder, tmp / f"n{n}.json", args.atol)
            rows.append({"n": n, "bytes": size * n / max(sizes), **row})
    print(f"PP-OCRv4 det, inputs {args.shape}, emulate backend, atol {args.atol}; one process per row\n")
    print("| N | input data (GB) | evaluations | FP32 nodes | seconds | peak memory (MB) | ratio to N = 1 |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    base = rows[0]["peak_mb"]
    for r in rows:
        print(f"| {r['n']} | {r['bytes'] / 1e9:.2f} | {r['evaluations']} | {r['fp32']} | {r['seconds']:.1f} | "
              f"{r['peak_mb']:.0f} | {r['peak_mb'] / base:.2f}x |")
    ratio = rows[-1]["peak_mb"] / base
    met = "met" if ratio <= TARGET_RATIO else f"MISSED by {ratio / TARGET_RATIO:.2f}x"
    print(f"\ntarget at N = {rows[-1]['n']}: peak <= {TARGET_RATIO:g}x the one-sample search: {ratio:.2f}x, {met}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
