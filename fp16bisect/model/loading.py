"""Reading a model file: its hash, its skeleton (weights left where they are), and the checks every reader needs
(an IR version, a default-domain opset, names that are text)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import onnx

from fp16bisect.errors import UsageError
from fp16bisect.model import weights, wire
from fp16bisect.model.subgraphs import subgraphs

DEFAULT_DOMAINS = ("", "ai.onnx")


def load_model(path: str | Path) -> tuple[onnx.ModelProto, Path, str]:
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{str(path)!r} is a directory: pass the path of an .onnx file")
    if not path.is_file():
        raise UsageError(f"model file {str(path)!r} not found: pass the path of an .onnx file")
    hashed = hashlib.sha256()
    with open(path, "rb") as f:  # in pieces: the page cache holds the file, not this process
        for block in iter(lambda: f.read(1 << 24), b""):
            hashed.update(block)
    digest = hashed.hexdigest()
    model = None
    found = wire.skeleton(str(path.resolve()), weights.EXTERNAL_MIN)  # weights referred to where they are
    if found is not None:
        try:
            model = onnx.load_model_from_string(found)
        except Exception:  # noqa: BLE001 (protobuf's own reading says what is wrong, below)
            model = None
    if model is None:
        try:
            model = onnx.load_model(str(path), load_external_data=False)
        except Exception as exc:  # protobuf raises DecodeError and friends
            raise UsageError(
                f"{str(path)!r} is not an ONNX model ({type(exc).__name__}: truncated or corrupt, or another kind "
                "of file): pass an .onnx file, copied again if it was cut short"
            ) from None
    if not model.graph.node and not model.graph.output:
        raise UsageError(f"{str(path)!r} is not an ONNX model (no graph found): pass an .onnx file")
    _check_header(model, str(path))
    _check_text(model.graph, str(path))
    weights.externalize(model, path.parent, None)  # references absolute, and checked
    return model, path, digest


def _check_header(model: onnx.ModelProto, path: str) -> None:
    """What every ONNX reader needs before the graph: an IR version and an opset for the default domain."""
    if model.ir_version < 1:
        raise UsageError(
            f"{path!r} has no valid ONNX IR version ({model.ir_version}): export it again, or set "
            "model.ir_version (e.g. 8) and save it"
        )
    opsets = [o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS]
    if not opsets:
        cut = " (the file may be truncated)" if not model.opset_import else ""
        raise UsageError(
            f"{path!r} imports no opset for the default ONNX domain{cut}: export it again with an opset "
            "(e.g. opset_version=17)"
        )
    newest = onnx.defs.onnx_opset_version()
    if not 1 <= opsets[0] <= newest:
        raise UsageError(
            f"{path!r} uses ONNX opset {opsets[0]}, but the installed onnx knows opsets 1 to {newest}: "
            f"export it with an opset from 11 to {newest}"
        )


def _check_text(graph: onnx.GraphProto, path: str) -> None:
    """Names must be text: ONNX's strings are not checked as UTF-8 when read, and protobuf hands back bytes for
    one that is not (a corrupt file), which nothing downstream can print, compare or write to JSON."""
    def bad(value) -> bool:
        return isinstance(value, bytes)

    def refuse(what: str, value) -> None:
        raise UsageError(
            f"{path!r} is corrupt: {what} is not valid UTF-8 ({value[:40]!r}): export or copy the model again"
        )

    for kind, values in (("graph input", graph.input), ("graph output", graph.output),
                         ("value_info", graph.value_info), ("initializer", graph.initializer)):
        for v in values:
            if bad(v.name):
                refuse(f"the name of a {kind}", v.name)
    for i, node in enumerate(graph.node):
        for what, value in (("name", node.name), ("op_type", node.op_type), ("domain", node.domain)):
            if bad(value):
                refuse(f"the {what} of node #{i}", value)
        for t in (*node.input, *node.output):
            if bad(t):
                refuse(f"a tensor name of node #{i} ({node.name!r})", t)
        for sub in subgraphs(node):
            _check_text(sub, path)
