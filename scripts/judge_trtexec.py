#!/usr/bin/env python3
"""Judge an fp16bisect plan with trtexec on a GPU host: build the plan's mixed-precision ONNX strongly typed,
run it on every sample, and write the outputs for fp16bisect to compare (``--backend command``).

    fp16bisect search MODEL.onnx --inputs X.npz --backend command \\
        --check 'python scripts/judge_trtexec.py {model} {inputs} {outputs}'

Per plan, one build and one run per sample (all files in the plan's own directory, beside {outputs}):

    trtexec --onnx={model} --stronglyTyped --saveEngine=plan.engine --skipInference [--minShapes/--optShapes/--maxShapes]
    trtexec --loadEngine=plan.engine --loadInputs='x':sample_0.x.bin --exportOutput=sample_0.json \\
            --iterations=1 --warmUp=0 --duration=0 [--shapes=...]

``--stronglyTyped`` (TensorRT 10.x; a no-op on 11.x, strongly typed anyway) makes TensorRT compute each layer in
the precision the ONNX says, so the plan's FP32 nodes stay FP32. Inputs go to trtexec as raw binary files (as
numpy ``tofile`` writes them); ``--exportOutput`` writes JSON with 6 significant digits per value (trtexec's
stream default) and bare ``inf``/``nan`` tokens, both handled here. Inputs with dynamic dimensions get one
optimisation profile spanning the samples' shapes.

Exit codes, as fp16bisect reads them: 0 outputs written; 125 trtexec could not build or run this plan (the plan
is recorded as not evaluable, with trtexec's last lines); 255 no trtexec (an environment problem: fp16bisect
stops instead of recording every plan as failing).

Not run on a GPU here: this project's machines have none and cannot install TensorRT. The tests run it against
a stand-in ``trtexec`` that speaks the same flags and JSON (tests/test_command_backend.py).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

CANNOT_EVALUATE, ABORT = 125, 255


def dynamic_inputs(model: str) -> set[str]:
    import onnx

    graph = onnx.load(model, load_external_data=False).graph
    initializers = {t.name for t in graph.initializer}
    return {v.name for v in graph.input if v.name not in initializers
            and any(not d.HasField("dim_value") for d in v.type.tensor_type.shape.dim)}


def shape_spec(shapes: dict[str, tuple]) -> str:
    return ",".join(f"'{name}':{'x'.join(map(str, shape))}" for name, shape in shapes.items())


def read_export(path: Path) -> dict[str, np.ndarray]:
    """trtexec's --exportOutput JSON: [{"name", "dimensions": "1x3x4", "values": [...]}], where values may be
    bare inf, -inf, nan, -nan (C++ stream output, not JSON)."""
    text = path.read_text()
    text = re.sub(r"(?<=[\[,])(\s*)-nan\b", r"\1NaN", text)
    text = re.sub(r"(?<=[\[,])(\s*)nan\b", r"\1NaN", text)
    text = re.sub(r"(?<=[\[,])(\s*)(-?)inf\b", r"\1\2Infinity", text)
    found = {}
    for entry in json.loads(text):
        dims = [int(d) for d in entry["dimensions"].split("x") if d]
        found[entry["name"]] = np.asarray(entry["values"], dtype=np.float32).reshape(dims)
    return found


def run(trtexec: str, args: list[str], log: Path, what: str) -> bool:
    """trtexec with its output in ``log``; on failure, its last lines on stderr (fp16bisect keeps them)."""
    with open(log, "wb") as f:
        done = subprocess.run([trtexec, *args], stdout=f, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        lines = log.read_text(errors="replace").strip().splitlines()
        print(f"judge_trtexec: trtexec could not {what} (exit {done.returncode}): " + " | ".join(lines[-3:]),
              file=sys.stderr)
    return done.returncode == 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", help="the plan's mixed-precision ONNX ({model})")
    p.add_argument("inputs", help="the directory of sample_<i>.npz ({inputs})")
    p.add_argument("outputs", help="where to write sample_<i>.npz ({outputs})")
    p.add_argument("--trtexec", default="trtexec", help="the trtexec executable (default: trtexec on PATH)")
    p.add_argument("--device", type=int, default=None, help="CUDA device for trtexec (--device=N)")
    p.add_argument("--build-arg", action="append", default=[], metavar="ARG",
                   help="another trtexec build flag, e.g. --build-arg=--builderOptimizationLevel=3; repeatable")
    args = p.parse_args(argv)

    trtexec = shutil.which(args.trtexec)
    if trtexec is None:
        print(f"judge_trtexec: {args.trtexec!r} not found: install TensorRT and put trtexec on PATH, or pass "
              "--trtexec PATH", file=sys.stderr)
        return ABORT
    work = Path(args.outputs).parent / "trtexec"  # inside the plan's directory: removed with it
    work.mkdir(exist_ok=True)
    samples = sorted(Path(args.inputs).glob("sample_*.npz"), key=lambda f: int(f.stem.split("_")[1]))
    arrays = []
    for path in samples:
        with np.load(path) as npz:
            arrays.append({name: npz[name] for name in npz.files})
    device = [f"--device={args.device}"] if args.device is not None else []

    dynamic = dynamic_inputs(args.model)
    profile = []
    if dynamic:
        lo = {n: tuple(np.min([a[n].shape for a in arrays], axis=0)) for n in dynamic}
        hi = {n: tuple(np.max([a[n].shape for a in arrays], axis=0)) for n in dynamic}
        profile = [f"--minShapes={shape_spec(lo)}", f"--optShapes={shape_spec(hi)}", f"--maxShapes={shape_spec(hi)}"]
    engine = work / "plan.engine"
    if not run(trtexec, [f"--onnx={args.model}", "--stronglyTyped", f"--saveEngine={engine}", "--skipInference",
                         *profile, *device, *args.build_arg], work / "build.log", "build the engine"):
        return CANNOT_EVALUATE

    for path, feed in zip(samples, arrays):
        files = []
        for name, value in feed.items():
            file = work / f"{path.stem}.{len(files)}.bin"
            np.ascontiguousarray(value).tofile(file)
            files.append(f"'{name}':{file}")
        export = work / f"{path.stem}.json"
        shapes = [f"--shapes={shape_spec({n: feed[n].shape for n in sorted(dynamic)})}"] if dynamic else []
        if not run(trtexec, [f"--loadEngine={engine}", f"--loadInputs={','.join(files)}", f"--exportOutput={export}",
                             "--iterations=1", "--warmUp=0", "--duration=0", *shapes, *device],
                   work / f"{path.stem}.log", f"run {path.name}"):
            return CANNOT_EVALUATE
        np.savez(Path(args.outputs) / path.name, **read_export(export))
    print(f"judge_trtexec: built once, ran {len(samples)} sample(s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
