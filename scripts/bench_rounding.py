#!/usr/bin/env python3
"""Rounding told apart from overflow (issue 41 item 4): when a search says so, what it says, and how its estimate
compares with what the search then did. Prints a Markdown table (docs/commands/search.md) and each run's
``diagnosis:`` lines.

    python scripts/bench_rounding.py [--shape 736x1184] [--quick]

Rows: PP-OCRv4's detector (tests/real_models.py PP_OCRV4_DET) at the default tolerance on one image-like sample:
a white page with dark glyph-like blocks, normalised as PP-OCR expects (``bench_expensive.detector_image``, the
shape given), written to ``page.npz``; and the 40-MatMul chain of tests/rounding_models.py at atol 1e-3, rtol 0.
``--quick``: the chain alone. Each search is ``fp16bisect search`` in a process of its own (emulate backend); its
seconds are wall time from start to each line (the load of a shared machine slows them), its CPU seconds from
``os.wait4``. "said after": the evaluation the diagnosis followed and the seconds from the start.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT / "tests")]


def detector(folder: Path, shape: str) -> tuple[str, list[str], str]:
    from bench_expensive import detector_image
    from real_models import PP_OCRV4_DET, real_model

    h, w = (int(v) for v in shape.split("x"))
    np.savez(folder / "page.npz", x=detector_image(h, w))
    return f"PP-OCRv4 det, 1x3x{h}x{w} page", [str(real_model(PP_OCRV4_DET)), "--inputs", str(folder / "page.npz")], \
        "atol 0.01, rtol 0.01"


def chain(folder: Path) -> tuple[str, list[str], str]:
    from rounding_models import matmul_chain

    model, data = matmul_chain(folder)
    return "40-MatMul chain", [str(model), "--inputs", str(data), "--atol", "1e-3", "--rtol", "0"], "atol 1e-3, rtol 0"


def one_search(argv: list[str], folder: Path) -> tuple[list[tuple[float, str]], float, float, dict]:
    """The lines ``fp16bisect search ARGV -o folder/o.json`` wrote to stderr, each with its second from the start;
    the wall and CPU seconds; and the override JSON."""
    out = folder / "o.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "fp16bisect", "search", *argv, "-o", str(out)], cwd=folder,
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert child.stderr is not None
    lines = [(time.perf_counter() - start, line.rstrip("\n")) for line in child.stderr]
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit("\n".join(text for _, text in lines[-20:]))
    return lines, wall, usage.ru_utime + usage.ru_stime, json.loads(out.read_text())


def row(name: str, tolerance: str, lines, wall: float, cpu: float, found: dict) -> str:
    said = found.get("diagnosis")
    search = found["search"]
    if said is None:
        return f"| {name} | {tolerance} | {search['candidates']} | nothing said | - | - | - | {len(found['fp32_nodes'])}" \
               f" / {search['evaluations']} | {wall:.0f} / {cpu:.0f} |"
    first = next(t for t, text in lines if "diagnosis:" in text)
    passing = said.get("passing_tolerance", {}).get("tolerance", {})
    ranking, estimate = said.get("ranking", {}), said.get("estimate", {})
    return (f"| {name} | {tolerance} | {search['candidates']} | {said['trigger']}: evaluation "
            f"{said['said_after_evaluation']}, {first:.0f} s | atol {passing.get('atol', '-'):g}, rtol "
            f"{passing.get('rtol', '-'):g} | {ranking.get('explained', 0):.0%} ({ranking.get('seconds', 0):.0f} s) | "
            f"{estimate.get('fp32_nodes', '-')} / {estimate.get('evaluations', '-')} | {len(found['fp32_nodes'])} / "
            f"{search['evaluations']} | {wall:.0f} / {cpu:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="736x1184", help="the detector's input HxW (default 736x1184)")
    parser.add_argument("--quick", action="store_true", help="the MatMul chain alone")
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; backend: "
          "emulate (ONNX Runtime CPU); load average at start "
          f"{os.getloadavg()[0]:.1f}")
    rows = ["| model | tolerance | candidates | diagnosis said after | all-FP16 passes at | top 5 explain (ranking) "
            "| estimate: FP32 nodes / evaluations | answer: FP32 nodes / evaluations | seconds wall / CPU |",
            "|---|---|---:|---|---|---|---:|---:|---:|"]
    cases = [chain] if args.quick else [chain, lambda folder: detector(folder, args.shape)]
    for case in cases:
        with tempfile.TemporaryDirectory(prefix="bench_rounding-") as where:
            folder = Path(where)
            name, argv, tolerance = case(folder)
            lines, wall, cpu, found = one_search(argv, folder)
            print(f"\n{name}:")
            for t, text in lines:
                if "diagnosis:" in text or text.startswith("fp16bisect:   ") or "ranking" in text:
                    print(f"  [{t:6.1f} s] {text}")
            rows.append(row(name, tolerance, lines, wall, cpu, found))
    print()
    print("\n".join(rows))


if __name__ == "__main__":
    main()
