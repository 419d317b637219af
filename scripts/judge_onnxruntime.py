#!/usr/bin/env python3
"""Judge an fp16bisect plan with ONNX Runtime: run the plan's mixed-precision model on every sample and write
its outputs for fp16bisect to compare (``--backend command``).

    fp16bisect search MODEL.onnx --inputs X.npz --backend command \\
        --check 'python scripts/judge_onnxruntime.py {model} {inputs} {outputs}'

``--provider cuda`` (default) runs the model as it is on ONNX Runtime's CUDA provider, whose FP16 kernels
compute what an FP16 deployment on ONNX Runtime computes. ``--provider tensorrt`` uses ONNX Runtime's TensorRT
provider (FP16 tensors in the model are honoured). ``--provider cpu`` is for machines without a GPU: ONNX
Runtime's CPU provider has no FP16 arithmetic kernels and would silently compute the FP16 nodes in FP32, so the
model is first rewritten (``fp16bisect.artifacts.verify.storage_emulation``) into an FP32 graph where every FP16
tensor goes through an explicit Cast(FLOAT16) -> Cast(FLOAT) round trip: FP16 storage, FP32 arithmetic.

``--fingerprint`` (fp16bisect asks it once, ``python scripts/judge_onnxruntime.py --provider cpu --fingerprint``)
prints where it judges as JSON: ONNX Runtime's version, the provider, and the device for a GPU provider; the
override JSON records it, and ``check`` says when it changed.

Exit codes, as fp16bisect reads them: 0 outputs written (fp16bisect compares them); 125 ONNX Runtime could not
load or run this plan's model (the plan is recorded as not evaluable); 255 the provider asked for is not
available (an environment problem, not the plan's: fp16bisect stops instead of recording every plan as failing).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

PROVIDERS = {"cuda": "CUDAExecutionProvider", "tensorrt": "TensorrtExecutionProvider", "cpu": "CPUExecutionProvider"}
CANNOT_EVALUATE, ABORT = 125, 255


def fingerprint(argv: list[str]) -> int:
    """Where this judge judges, as one JSON object (what ``--fingerprint`` prints)."""
    import json

    import onnxruntime as ort

    p = argparse.ArgumentParser()
    p.add_argument("--provider", choices=sorted(PROVIDERS), default="cuda")
    p.add_argument("--device", type=int, default=0)
    args, _ = p.parse_known_args(argv)
    found = {"onnxruntime": ort.__version__, "provider": PROVIDERS[args.provider]}
    if args.provider != "cpu":
        found["device"] = str(args.device)
    print(json.dumps(found))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--fingerprint" in argv:
        return fingerprint([a for a in argv if a != "--fingerprint"])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", help="the plan's mixed-precision ONNX ({model})")
    p.add_argument("inputs", help="the directory of sample_<i>.npz ({inputs})")
    p.add_argument("outputs", help="where to write sample_<i>.npz ({outputs})")
    p.add_argument("--provider", choices=sorted(PROVIDERS), default="cuda", help="default cuda")
    p.add_argument("--device", type=int, default=0, help="GPU index for cuda/tensorrt (default 0)")
    args = p.parse_args(argv)

    import onnx
    import onnxruntime as ort

    provider = PROVIDERS[args.provider]
    if provider not in ort.get_available_providers():
        print(f"judge_onnxruntime: {provider} is not available in this onnxruntime "
              f"({', '.join(ort.get_available_providers())}): install onnxruntime-gpu, or pass --provider cpu",
              file=sys.stderr)
        return ABORT
    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        if args.provider == "cpu":  # no FP16 kernels: FP16 storage made explicit, or FP16 would not show at all
            from fp16bisect.artifacts.verify import storage_emulation

            model = storage_emulation(onnx.load(args.model)).SerializeToString()
            # basic optimisations, as fp16bisect's own checks: no layout change that reorders FP32 sums
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
            providers = [provider]
        else:
            model = args.model
            providers = [(provider, {"device_id": args.device})]
        session = ort.InferenceSession(model, options, providers=providers)
    except Exception as exc:  # this plan's model: recorded as not evaluable, with the reason
        print(f"judge_onnxruntime: ONNX Runtime cannot load {args.model}: {exc}", file=sys.stderr)
        return CANNOT_EVALUATE
    names = [o.name for o in session.get_outputs()]
    samples = sorted(Path(args.inputs).glob("sample_*.npz"), key=lambda f: int(f.stem.split("_")[1]))
    for path in samples:
        with np.load(path) as npz:
            feed = {name: npz[name] for name in npz.files}
        try:
            values = session.run(names, feed)
        except Exception as exc:
            print(f"judge_onnxruntime: ONNX Runtime failed on {path.name}: {exc}", file=sys.stderr)
            return CANNOT_EVALUATE
        np.savez(Path(args.outputs) / path.name,
                 **{n: np.asarray(v, dtype=np.float32) if np.issubdtype(np.asarray(v).dtype, np.floating) else v
                    for n, v in zip(names, values)})
    print(f"judge_onnxruntime: {len(samples)} sample(s) run on {provider}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
