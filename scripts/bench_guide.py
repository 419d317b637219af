#!/usr/bin/env python3
"""The searches the guide pages quote (docs/quickstart.md, docs/tolerance.md, docs/precision.md): their answers
and evaluations, one Markdown table per page, from samples made here the same way every time.

    python scripts/bench_guide.py [--pages quickstart,tolerance,precision] [--big]

Each row is ``fp16bisect.search`` on the emulate backend (no journal, nothing written). Models: the sample
transformer (``sample_models/transformer_block.onnx``, 41 candidates) and Silero VAD (silero-vad 6.2.3's
``silero_vad_16k_sequence.onnx``, 17 candidates, from its PyPI wheel through ``tests/real_models.py``). Samples:

* ``shipped``: ``sample_models/transformer_block.npz``;
* ``noise``: the four samples of the README's example, ``rng = np.random.default_rng(0)``, then
  ``rng.normal(size=(1, 16, 64))`` four times;
* ``silero``: one sample, ``rng = np.random.default_rng(0)``, then ``input`` = 0.5 x ``rng.standard_normal((8,
  576))`` (8 rows of 36 ms at 16 kHz), ``h`` and ``c`` = 0.5 x ``rng.standard_normal((1, 1, 128))`` each, in
  that order (what tests/test_judge_outputs.py and tests/test_bf16.py search);
* ``--big``: instead of Silero VAD's row, PP-OCRv4's recognizer (rapidocr-onnxruntime 1.4.4's ``ch_PP-OCRv4_rec_infer.onnx``, 374
  candidates) under BF16 on one sample, ``np.random.default_rng(0).random((1, 3, 48, 320))``: minutes.

The seconds are wall time of the search alone (loading and the FP32 profile included) on the machine that runs
it; everything else is the same on every run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # real_models: the wheels' models, downloaded once and cached

TRANSFORMER = str(ROOT / "sample_models" / "transformer_block.onnx")


def noise() -> list[dict]:
    rng = np.random.default_rng(0)
    return [{"x": rng.normal(size=(1, 16, 64)).astype(np.float32)} for _ in range(4)]


def silero() -> tuple[str, dict]:
    from real_models import SILERO_VAD_SEQ, real_model

    rng = np.random.default_rng(0)
    data = {"input": (rng.standard_normal((8, 576)) * 0.5).astype(np.float32),
            "h": (rng.standard_normal((1, 1, 128)) * 0.5).astype(np.float32),
            "c": (rng.standard_normal((1, 1, 128)) * 0.5).astype(np.float32)}
    return str(real_model(SILERO_VAD_SEQ)), data


def recognizer() -> tuple[str, dict]:
    from real_models import PP_OCRV4_REC, real_model

    return str(real_model(PP_OCRV4_REC)), {"x": np.random.default_rng(0).random((1, 3, 48, 320), dtype=np.float32)}


def search(model, samples, **how) -> tuple[dict, float]:
    import fp16bisect

    start = time.perf_counter()
    found = fp16bisect.search(model, samples, judge="emulate", **how)
    return found.to_dict(), time.perf_counter() - start


def nodes(found: dict, names: bool = True) -> str:
    kept = [n["name"] for n in found["fp32_nodes"]]
    said = f"{len(kept)} of {found['search']['candidates']}"
    return f"{said}: {', '.join(sorted(kept))}" if names and 0 < len(kept) <= 3 else said


def quickstart() -> list[str]:
    rows = ["| model | samples | FP32 nodes | evaluations |", "|---|---|---|---:|"]
    for label, samples in (("its shipped sample", str(ROOT / "sample_models" / "transformer_block.npz")),
                           ("the four noise samples (normal, seed 0)", noise())):
        found, _ = search(TRANSFORMER, samples)
        rows.append(f"| transformer_block | {label} | {nodes(found)} | {found['search']['evaluations']} |")
    return rows


def tolerance() -> list[str]:
    rows = ["| model | samples | tolerance | FP32 nodes | evaluations |", "|---|---|---|---|---:|"]
    shipped = str(ROOT / "sample_models" / "transformer_block.npz")
    model, data = silero()
    for label, where, samples, flags, given in (
            ("transformer_block", "its shipped sample", shipped, "defaults (atol 0.01, rtol 0.01)", {}),
            ("transformer_block", "its shipped sample", shipped, "--atol 1e-9 --rtol 0", {"atol": 1e-9, "rtol": 0.0}),
            ("Silero VAD", "silero (seed 0)", data, "--atol 2e-5 --rtol 0", {"atol": 2e-5, "rtol": 0.0}),
            ("Silero VAD", "silero (seed 0)", data, "--atol speech_probs:2e-5 --atol 0.01 --rtol 0",
             {"atol": ["speech_probs:2e-5", "0.01"], "rtol": 0.0})):
        found, _ = search(TRANSFORMER if label == "transformer_block" else model, samples, tolerance=given)
        rows.append(f"| {label} | {where} | {flags} | {nodes(found)} | {found['search']['evaluations']} |")
    return rows


def precision(big: bool) -> list[str]:
    header = ["| model | samples | all-FP16 max error | all-BF16 max error | BF16 answer | evaluations | "
              "contradictions | seconds |", "|---|---|---:|---:|---|---:|---:|---:|"]
    import fp16bisect

    tol = {"atol": 0.02, "rtol": 0.0}
    cases = [("PP-OCRv4 rec", "uniform [0, 1), seed 0", *recognizer())] if big else \
        [("Silero VAD", "silero (seed 0)", *silero())]
    rows = []
    for label, where, model, data in cases:
        errors = []
        for space in ("fp16", "bf16"):
            checked = fp16bisect.check(model, data, space=space, tolerance=tol, judge="emulate").to_dict()
            errors.append(max(o["max_abs"] for o in checked["outputs"].values()))
        found, seconds = search(model, data, space="bf16", tolerance=tol)
        said = found["search"]
        step = said.get("improvement") or {}
        alone = f" (the search alone: {step['one_minimal']})" if step.get("ran") else ""
        rows.append(f"| {label} | {where} | {errors[0]:.2g} | {errors[1]:.2g} | {nodes(found, False)} nodes{alone}, "
                    f"{'1-minimal' if said['minimal'] else 'not 1-minimal'} | {said['evaluations']} | "
                    f"{said['contradictions']['count']} | {seconds:.1f} |")
    return header + rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", default="quickstart,tolerance,precision", help="which pages' tables")
    parser.add_argument("--big", action="store_true", help="precision: PP-OCRv4's recognizer under BF16 (minutes)")
    args = parser.parse_args()
    pages = args.pages.split(",")
    for page in pages:
        rows = {"quickstart": quickstart, "tolerance": tolerance}[page]() if page != "precision" else \
            precision(args.big)
        print(f"## docs/{page}.md\n\n" + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
