#!/usr/bin/env python
"""Export five real architectures (random weights) to ONNX, with inputs (dev only).

Needs torch, transformers and diffusers (plus onnx and numpy), which are NOT
dependencies of fp16bisect: run it from a separate virtual environment, e.g.

    python3 -m venv ~/hfvenv
    ~/hfvenv/bin/pip install torch==2.13.0          # the CPU wheel
    ~/hfvenv/bin/pip install transformers diffusers onnx onnxscript numpy
    ~/hfvenv/bin/python scripts/export_zoo.py                   # writes build/zoo/
    ~/hfvenv/bin/python scripts/export_zoo.py OUT_DIR           # writes OUT_DIR/
    ~/hfvenv/bin/python scripts/export_zoo.py --models vit_b16 sd_vae_decoder

No weights are downloaded (``HF_HUB_OFFLINE=1`` is set): every model is
built from a config written out below, with random initialisation
(``torch.manual_seed(0)``, ``.eval()``). Each model ``NAME`` gets
``NAME.onnx`` (classic TorchScript exporter, ``dynamo=False``, opset 17,
IR version at most 9, fixed input shapes) and ``NAME.npz`` (one array per
ONNX graph input, keyed by the input name, with the dtype the ONNX model
declares; floats are standard normal from ``numpy.random.default_rng(1)``,
token ids uniform in ``[0, vocab)``). PyTorch's own outputs on those inputs go
to ``reference/NAME.npz`` (keyed by ONNX output name).

    bert_base       transformers BertModel(BertConfig()): 12 layers, 768, vocab 30522.
                    input_ids, attention_mask, token_type_ids (all 0), int64 1x128;
                    the last 16 positions padded (mask 0, id 0).
                    Outputs last_hidden_state, pooler_output. 417 MiB, 670 nodes.
    gpt2_medium     transformers GPT2Model(GPT2Config(n_embd=1024, n_layer=24, n_head=16)).
                    input_ids, attention_mask int64 1x128; the first 16 positions padded
                    (left padding, id 0); position ids are the default 0..n-1; use_cache=False.
                    Output last_hidden_state. 1.35 GiB, 1629 nodes, still inline (< 2 GiB).
    vit_b16         transformers ViTModel(ViTConfig()) (the default config is ViT-B/16, 224x224).
                    pixel_values float 1x3x224x224. Outputs last_hidden_state, pooler_output.
                    329 MiB, 662 nodes.
    sd_vae_decoder  diffusers AutoencoderKL with the Stable Diffusion 1.5 VAE config; only the
                    decoder path is exported (post_quant_conv + decoder: ``vae.decode(z).sample``).
                    latent_sample float 1x4x32x32 -> sample 1x3x256x256. 189 MiB, 510 nodes.
    sd15_unet       diffusers UNet2DConditionModel with the Stable Diffusion 1.5 config.
                    sample float 1x4x32x32, timestep int64 [1] (value drawn from [0, 1000)),
                    encoder_hidden_states float 1x77x768 -> out_sample 1x4x32x32.
                    ~3.4 GB of weights: saved with external data, sd15_unet.onnx plus ONE
                    sd15_unet.onnx.data (tensors >= 1024 bytes) next to it. 2979 nodes.

What each export needed:

* BERT, GPT-2, ViT: ``config._attn_implementation = "eager"`` so attention is
  plain MatMul/Softmax (BERT's and GPT-2's padding mask becomes the additive
  ``Where(mask, 0, finfo(float32).min)``). A wrapper returns plain tensors
  instead of the ModelOutput; GPT-2 gets ``use_cache=False``. BERT takes
  ``token_type_ids``, so it is a graph input (otherwise the buffered zeros
  would be folded into the graph).
* ViT: transformers' ViTModel, so torchvision (and its MHA fast path, which
  needs ``torch.backends.mha.set_fastpath_enabled(False)`` to export) is not
  needed.
* VAE decoder: a wrapper whose forward is ``vae.decode(z).sample``; the encoder
  weights stay out of the graph. diffusers' default attention processor
  (``F.scaled_dot_product_attention``) exports through the opset-14 symbolic as
  MatMul/Softmax/MatMul.
* UNet: the timestep is an int64 [1] tensor (diffusers casts it to float inside
  the sinusoidal embedding, exported as a Cast). The model is over 2 GB, so the
  classic exporter writes it with external data, one file per tensor; the
  export goes to a scratch directory and the tensors are then streamed, one at
  a time, into a single ``sd15_unet.onnx.data`` (the torch model is freed
  first and the ONNX weights are never all in memory at once).

The outputs are deterministic (identical files on a re-run). All five take
about 1.5 minutes on 2 CPU cores and peak at about 6 GB RSS (GPT-2's inline
re-save; the UNet export alone peaks at about 4.5 GB).
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import external_data_helper, helper

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "build" / "zoo"
OPSET = 17
MAX_IR = 9
EXTERNAL_THRESHOLD = 1024  # bytes: tensors at least this big go to NAME.onnx.data


def _rng():
    return np.random.default_rng(1)


def _token_inputs(vocab: int, seq: int, pad: int, left: bool):
    """1 x seq random token ids and a mask with ``pad`` padded positions (left or right)."""
    ids = _rng().integers(0, vocab, size=(1, seq), dtype=np.int64)
    mask = np.ones((1, seq), dtype=np.int64)
    if left:
        mask[:, :pad] = 0
    else:
        mask[:, seq - pad :] = 0
    ids[mask == 0] = 0  # pad token id
    return ids, mask


def _returning(fn):
    """A torch module whose forward is ``fn(inner, *args)``."""
    import torch

    class Wrapper(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *args):
            return fn(self.inner, *args)

    return Wrapper


# Each builder returns (torch module, {input name: numpy array} in forward order, output names, external data?)


def build_bert_base():
    from transformers import BertConfig, BertModel

    config = BertConfig()
    config._attn_implementation = "eager"
    model = BertModel(config)
    ids, mask = _token_inputs(config.vocab_size, 128, 16, left=False)
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}

    def forward(inner, input_ids, attention_mask, token_type_ids):
        out = inner(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, return_dict=True)
        return out.last_hidden_state, out.pooler_output

    return _returning(forward)(model), feeds, ["last_hidden_state", "pooler_output"], False


def build_gpt2_medium():
    from transformers import GPT2Config, GPT2Model

    config = GPT2Config(n_embd=1024, n_layer=24, n_head=16)
    config._attn_implementation = "eager"
    model = GPT2Model(config)
    ids, mask = _token_inputs(config.vocab_size, 128, 16, left=True)
    feeds = {"input_ids": ids, "attention_mask": mask}

    def forward(inner, input_ids, attention_mask):
        out = inner(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, return_dict=True)
        return out.last_hidden_state

    return _returning(forward)(model), feeds, ["last_hidden_state"], False


def build_vit_b16():
    from transformers import ViTConfig, ViTModel

    config = ViTConfig()  # ViT-B/16: 12 layers, hidden 768, 12 heads, patch 16, image 224
    config._attn_implementation = "eager"
    model = ViTModel(config)
    feeds = {"pixel_values": _rng().standard_normal((1, 3, 224, 224), dtype=np.float32)}

    def forward(inner, pixel_values):
        out = inner(pixel_values=pixel_values, return_dict=True)
        return out.last_hidden_state, out.pooler_output

    return _returning(forward)(model), feeds, ["last_hidden_state", "pooler_output"], False


def build_sd_vae_decoder():
    from diffusers import AutoencoderKL

    vae = AutoencoderKL(  # Stable Diffusion 1.5 VAE
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        block_out_channels=(128, 256, 512, 512),
        layers_per_block=2,
        act_fn="silu",
        latent_channels=4,
        norm_num_groups=32,
        sample_size=512,
        scaling_factor=0.18215,
    )
    feeds = {"latent_sample": _rng().standard_normal((1, 4, 32, 32), dtype=np.float32)}

    def forward(inner, latent_sample):
        return inner.decode(latent_sample).sample

    return _returning(forward)(vae), feeds, ["sample"], False


def build_sd15_unet():
    from diffusers import UNet2DConditionModel

    unet = UNet2DConditionModel(  # Stable Diffusion 1.5 UNet
        sample_size=64,
        in_channels=4,
        out_channels=4,
        center_input_sample=False,
        flip_sin_to_cos=True,
        freq_shift=0,
        down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
        up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3,
        block_out_channels=(320, 640, 1280, 1280),
        layers_per_block=2,
        downsample_padding=1,
        mid_block_scale_factor=1,
        act_fn="silu",
        norm_num_groups=32,
        norm_eps=1e-5,
        cross_attention_dim=768,
        attention_head_dim=8,
    )
    rng = _rng()
    feeds = {
        "sample": rng.standard_normal((1, 4, 32, 32), dtype=np.float32),
        "timestep": rng.integers(0, 1000, size=(1,), dtype=np.int64),
        "encoder_hidden_states": rng.standard_normal((1, 77, 768), dtype=np.float32),
    }

    def forward(inner, sample, timestep, encoder_hidden_states):
        return inner(sample, timestep, encoder_hidden_states=encoder_hidden_states, return_dict=True).sample

    return _returning(forward)(unet), feeds, ["out_sample"], True


MODELS = {
    "bert_base": build_bert_base,
    "gpt2_medium": build_gpt2_medium,
    "vit_b16": build_vit_b16,
    "sd_vae_decoder": build_sd_vae_decoder,
    "sd15_unet": build_sd15_unet,
}


# ---------------------------------------------------------------- export


def merge_external_data(src: Path, dst: Path) -> onnx.ModelProto:
    """Copy ``src`` (an ONNX file with any external data layout) to ``dst`` with ONE ``dst.data`` file.

    Tensors of at least ``EXTERNAL_THRESHOLD`` bytes go to the data file, back to back (the layout of
    ``onnx.save_model(..., save_as_external_data=True, all_tensors_to_one_file=True)``); smaller ones
    inline. Each external tensor's bytes are read from its file and written straight out, one tensor at a
    time, never into the proto, so the weights are never all in memory. Returns the proto of ``dst``.
    """
    location = dst.name + ".data"
    model = onnx.load(str(src), load_external_data=False)
    with open(dst.parent / location, "wb") as out:
        for tensor in external_data_helper._get_all_tensors(model):
            if external_data_helper.uses_external_data(tensor):
                info = external_data_helper.ExternalDataInfo(tensor)
                with open(src.parent / info.location, "rb") as f:
                    f.seek(info.offset or 0)
                    blob = f.read() if info.length is None else f.read(info.length)
            elif tensor.HasField("raw_data"):
                blob = tensor.raw_data
            else:
                continue
            del tensor.external_data[:]
            if len(blob) < EXTERNAL_THRESHOLD:
                tensor.raw_data = blob
                tensor.data_location = onnx.TensorProto.DEFAULT
                continue
            tensor.ClearField("raw_data")
            tensor.data_location = onnx.TensorProto.EXTERNAL
            for key, value in (("location", location), ("offset", out.tell()), ("length", len(blob))):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, str(value)
            out.write(blob)
            del blob
    model.ir_version = min(model.ir_version, MAX_IR)
    onnx.save(model, str(dst))  # the weights are in the data file already: only the references are saved
    return model


def export(name: str, out_dir: Path) -> Path:
    import torch

    torch.manual_seed(0)
    module, feeds, outputs, external = MODELS[name]()
    module.eval()
    args = tuple(torch.from_numpy(a) for a in feeds.values())
    path = out_dir / f"{name}.onnx"
    with torch.no_grad():
        reference = module(*args)
        if not isinstance(reference, tuple):
            reference = (reference,)
        reference = {k: v.numpy().copy() for k, v in zip(outputs, reference)}
        scratch = out_dir / f".{name}.export" if external else None
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
            scratch.mkdir()
        target = scratch / path.name if scratch is not None else path
        torch.onnx.export(
            module,
            args,
            str(target),
            input_names=list(feeds),
            output_names=outputs,
            opset_version=OPSET,
            dynamo=False,
        )
    del module, args
    gc.collect()

    if scratch is not None:
        model = merge_external_data(target, path)
        shutil.rmtree(scratch)
        onnx.checker.check_model(str(path))
    else:
        model = onnx.load(str(path))
        model.ir_version = min(model.ir_version, MAX_IR)
        onnx.checker.check_model(model)
        onnx.save_model(model, str(path), save_as_external_data=False)

    arrays = {}
    for inp in model.graph.input:
        dtype = helper.tensor_dtype_to_np_dtype(inp.type.tensor_type.elem_type)
        arrays[inp.name] = np.ascontiguousarray(feeds[inp.name].astype(dtype))
    missing = sorted(set(feeds) - set(arrays))
    if missing:
        print(f"  note: not graph inputs (folded away): {', '.join(missing)}")
    np.savez(out_dir / f"{name}.npz", **arrays)
    (out_dir / "reference").mkdir(exist_ok=True)
    np.savez(out_dir / "reference" / f"{name}.npz", **reference)
    return path


def report(path: Path, seconds: float) -> None:
    model = onnx.load(str(path), load_external_data=False)
    data = path.with_name(path.name + ".data")
    size = path.stat().st_size + (data.stat().st_size if data.exists() else 0)
    print(f"{path}  ({seconds:.1f} s)")
    extra = f" (+ {data.name})" if data.exists() else ""
    print(f"  size {size / 2**20:.1f} MiB{extra}, {len(model.graph.node)} nodes, IR {model.ir_version}, opset {OPSET}")

    def fmt(values):
        out = []
        for v in values:
            t = v.type.tensor_type
            dtype = helper.tensor_dtype_to_np_dtype(t.elem_type).name
            shape = "x".join(str(d.dim_value) if d.HasField("dim_value") else d.dim_param or "?" for d in t.shape.dim)
            out.append(f"{v.name}:{dtype}[{shape}]")
        return ", ".join(out)

    print(f"  inputs: {fmt(model.graph.input)}")
    print(f"  outputs: {fmt(model.graph.output)}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "out", nargs="?", type=Path, default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})"
    )
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.models:
        start = time.perf_counter()
        path = export(name, args.out)
        report(path, time.perf_counter() - start)
        gc.collect()
    return 0


if __name__ == "__main__":
    sys.exit(main())
