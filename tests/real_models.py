"""Real models nobody on the team wrote, taken from PyPI wheels (downloaded once, then cached).

The cache is ``$FP16BISECT_MODEL_CACHE`` or ``~/.cache/fp16bisect/test-models``; a machine without access to
PyPI fails these tests loudly rather than skipping them, since a test that cannot fail is a defect.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

CACHE = Path(os.environ.get("FP16BISECT_MODEL_CACHE", Path.home() / ".cache" / "fp16bisect" / "test-models"))

# (package, version, member inside the wheel)
PP_OCRV4_DET = ("rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx")
PP_OCRV4_REC = ("rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx")
PP_OCR_CLS = ("rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx")
NUDENET_320N = ("nudenet", "3.4.2", "nudenet/320n.onnx")  # YOLOv8n-style detector, input images [N, 3, H, W]
# Silero VAD with LSTM: input [sequence, 576] (36 ms at 16 kHz a row), h and c [1, 1, 128]
SILERO_VAD_SEQ = ("silero-vad", "6.2.3", "silero_vad/data/silero_vad_16k_sequence.onnx")
DDDDOCR_DET = ("ddddocr", "1.6.1", "ddddocr/common_det.onnx")  # YOLOX-style text detector, images [1, 3, 416, 416]


def wheel_member(package: str, version: str, member: str) -> Path:
    """The file ``member`` of ``package==version``'s wheel, extracted under the cache; downloaded on first use."""
    target = CACHE / f"{package}-{version}" / member
    if target.exists():
        return target
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    stem = package.replace("-", "_") + f"-{version}-"
    found = [w for w in wheels.glob("*.whl") if w.name.startswith(stem)]
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"{package}=={version}",
                        "-d", str(wheels)], check=True)
        found = [w for w in wheels.glob("*.whl") if w.name.startswith(stem)]
    with zipfile.ZipFile(found[0]) as wheel:
        data = wheel.read(member)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    partial.write_bytes(data)
    partial.replace(target)
    return target


def real_model(which: tuple[str, str, str]) -> Path:
    return wheel_member(*which)
