#!/usr/bin/env python
"""Time a plain onnxruntime CPU session on a model: creation, then one run (dev only).

    /usr/bin/time -v python scripts/plain_ort.py build/zoo/bert_base.onnx build/zoo/bert_base.npz

Default session options, CPU execution provider, the model loaded from its path
(so external data next to it resolves). The inputs are read before the clock
starts. Prints ``seconds_session seconds_run`` on one line.
"""

import sys
import time

import numpy as np
import onnxruntime as ort


def main(model: str, inputs: str) -> None:
    with np.load(inputs) as npz:
        feeds = {k: npz[k] for k in npz.files}
    start = time.perf_counter()
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    created = time.perf_counter()
    session.run(None, feeds)
    done = time.perf_counter()
    print(f"{created - start:.3f} {done - created:.3f}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} MODEL.onnx INPUTS.npz")
    main(sys.argv[1], sys.argv[2])
