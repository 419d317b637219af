"""The precision-override JSON that build pipelines read, and its exports.

Schema ``fp16bisect.overrides/1`` (a public interface; change deliberately):

    schema      "fp16bisect.overrides/1"
    model       {path, sha256}
    backend     {name, versions}
    tolerance   {atol, rtol, min_cosine, max_mismatch}
    fp32_nodes  [{name, op_type, outputs, fp32_profile}]   name = fp16bisect node id
    search      {status, candidates, evaluations, minimal, minimality, verified, contradictions, seconds,
                 trace, build_failures: [{fp32: [node ids], error: the backend's message}]}
    metrics     {fp32, fp16, with_overrides}: output -> worst metrics over samples
    exports     {strongly_typed: {tensorrt, command, trtexec}, trtexec: {...}, modelopt_autocast: {...}}
                (the strongly typed route first: TensorRT must honour the types of a mixed-precision model,
                while 10.x weak-typing pins can be ignored where layers are fused, NVIDIA/TensorRT#3889)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import tempfile
from pathlib import Path

from fp16bisect.errors import UsageError
from fp16bisect.model.graph import Graph, Node
from fp16bisect.tolerance import Tolerance

SCHEMA = "fp16bisect.overrides/1"
REQUIRED = ("schema", "model", "backend", "tolerance", "fp32_nodes", "search", "metrics", "exports")


def trtexec_layer_name(node: Node) -> str:
    """The name TensorRT's ONNX parser gives a node's first layer (onnx-tensorrt ``getNodeName``)."""
    return node.name if node.name else f"node_of_{node.outputs[0]}"


def trtexec_export(graph: Graph, nodes: list[Node]) -> dict:
    """TensorRT 10 trtexec flags that keep these nodes' layers in FP32 (weak typing: prefer the strongly typed
    export, since TensorRT can ignore these pins where it fuses layers)."""
    warnings = []
    names = []
    for node in nodes:
        layer = trtexec_layer_name(node)
        if "," in layer or "'" in layer:
            warnings.append(
                f"node {node.id!r}: trtexec cannot express a layer name containing ',' or \"'\"; "
                "pin it through the TensorRT API instead"
            )
            continue
        if node.name in graph.duplicate_names:
            warnings.append(
                f"node {node.id!r}: its name {node.name!r} is shared by several nodes, so TensorRT renames "
                "all but one layer; rename the nodes in the model, or pin through the TensorRT API"
            )
        names.append(layer)
    if nodes:
        warnings.append(
            "trtexec names only the first layer of each node; a node TensorRT imports as several layers "
            "has more (named <node>_<n>), which these flags do not pin"
        )
    precisions = ",".join(f"{n}:fp32" for n in names)
    args = ["--fp16", "--precisionConstraints=obey"]
    if names:
        args += [f"--layerPrecisions={precisions}", f"--layerOutputTypes={precisions}"]
    model = str(graph.path) if graph.path else "model.onnx"
    return {
        "tensorrt": "10.x weakly typed (deprecated since 10.12, removed in 11); TensorRT may ignore these pins "
                    "where it fuses layers (NVIDIA/TensorRT#3889): prefer exports.strongly_typed",
        "args": args,
        "command": shlex.join(["trtexec", f"--onnx={model}", *args]),
        "warnings": warnings,
    }


LAYERNORM_PARTS = {"ReduceMean", "Pow", "Sqrt", "Div", "Sub", "Reciprocal"}


def autocast_export(graph: Graph, nodes: list[Node]) -> dict:
    """ModelOpt AutoCast arguments for TensorRT 11 strongly typed builds."""
    warnings = []
    patterns = []
    for node in nodes:
        if not node.name:
            warnings.append(
                f"node {node.id!r} has no name in the model: AutoCast names such nodes itself "
                "(<OpType>_<N>), so no pattern can select it; give the model's nodes names first"
            )
            continue
        if node.name in graph.duplicate_names:
            warnings.append(
                f"node {node.id!r}: its name {node.name!r} is shared by several nodes, so the pattern keeps "
                "all of them in FP32; give the model's nodes unique names to pin only this one"
            )
        pattern = f"^{re.escape(node.name)}$"
        if pattern not in patterns:
            patterns.append(pattern)
    if any(n.op_type in LAYERNORM_PARTS for n in nodes):
        warnings.append(
            "AutoCast may fuse a decomposed LayerNorm into one new node with a new name; if a pinned node "
            "is part of one, also pass --op_types_to_exclude LayerNormalization"
        )
    model = str(graph.path) if graph.path else "model.onnx"
    output = re.sub(r"\.onnx$", "", model) + ".fp16.onnx"
    args = [
        "--low_precision_type", "fp16",
        "--keep_io_types",
        "--data_max", "inf",
        "--init_max", "inf",
    ]
    if patterns:
        args += ["--nodes_to_exclude", *patterns]
    return {
        "nodes_to_exclude": patterns,
        "args": args,
        "command": shlex.join(
            ["python", "-m", "modelopt.onnx.autocast", "--onnx_path", model, "--output_path", output, *args]
        ),
        "warnings": warnings,
    }


def strongly_typed_export(graph: Graph, overrides_path: str | None) -> dict:
    """The mixed-precision model ``apply`` writes, built strongly typed: TensorRT 10.x (the flag exists since 9.0;
    trtexec --stronglyTyped), 11.x and TensorRT-RTX (always strongly typed)."""
    model = str(graph.path) if graph.path else "model.onnx"
    mixed = (model[:-5] if model.endswith(".onnx") else model) + ".mixed.onnx"
    return {
        "tensorrt": "10.x with --stronglyTyped (recommended; mixed-precision BatchNormalization needs 10.7+), "
                    "11.x and TensorRT-RTX (always strongly typed)",
        "command": shlex.join(["fp16bisect", "apply", overrides_path or "overrides.json", model, "-o", mixed]),
        "trtexec": shlex.join(["trtexec", f"--onnx={mixed}", "--stronglyTyped"]),
    }


def node_entry(node: Node, fp32_profile: str = "") -> dict:
    """fp32_profile: what the FP32 run saw at this node (why it was suspected, not proof it is needed)."""
    return {"name": node.id, "op_type": node.op_type, "outputs": list(node.outputs), "fp32_profile": fp32_profile}


def check_writable(path: str | Path) -> None:
    """Fail now, with a usable message, if ``path`` cannot be written later."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"-o {str(path)!r} is a directory: give a file name, e.g. {str(path / 'overrides.json')!r}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except OSError as exc:
        raise UsageError(f"cannot write {str(path)!r} ({exc.strerror}): choose another -o path") from None


def write_json(path: str | Path, data: dict) -> None:
    """Atomic: a reader sees the old file or the whole new one, never half."""
    write_atomic(path, (json.dumps(data, indent=2, allow_nan=False) + "\n").encode("utf-8"))


def write_atomic(path: str | Path, data) -> None:
    """``data``: the bytes, or a function that writes them to the open file (a model streamed from its maps)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise UsageError(f"cannot write {str(path)!r} ({exc.strerror}): choose another -o path") from None
    try:
        with os.fdopen(fd, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a report or override file is meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def read(path: str | Path, model_path: str | Path | None = None, force: bool = False,
         graph: Graph | None = None) -> dict:
    """Read and validate an override file; refuse one made for another model unless ``force``.

    With ``graph``, also refuse (whatever ``force``) a file none of whose nodes is in that model: see
    ``refuse_foreign``."""
    path = Path(path)
    again = "run 'fp16bisect search' again to write a new one"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"override file {str(path)!r} not found: run 'fp16bisect search' to make one") from None
    except IsADirectoryError:
        raise UsageError(f"override file {str(path)!r} is a directory: pass the JSON 'fp16bisect search' wrote") \
            from None
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{str(path)!r} is not an override file (not UTF-8 text: byte 0x{exc.object[exc.start]:02x} at "
            f"position {exc.start}): {again}"
        ) from None
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"{str(path)!r} is not an override file ({exc}): {again}") from None
    except RecursionError:
        raise UsageError(f"{str(path)!r} is not an override file (JSON nested too deeply): {again}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise UsageError(f"{str(path)!r} is not an fp16bisect override file (schema {SCHEMA!r} expected)")
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise UsageError(f"{str(path)!r} lacks key(s) {', '.join(missing)}: {again}")
    nodes = data["fp32_nodes"]
    if not isinstance(nodes, list) or not all(isinstance(n, dict) and isinstance(n.get("name"), str) for n in nodes):
        raise UsageError(f"{str(path)!r}: fp32_nodes must be a list of objects with a 'name'; {again}")
    if not isinstance(data["model"], dict) or not isinstance(data["model"].get("sha256", ""), str):
        raise UsageError(f"{str(path)!r}: 'model' must be an object with the model's 'sha256'; {again}")
    not_objects = [k for k in ("backend", "search", "metrics", "exports") if not isinstance(data[k], dict)]
    if not_objects:
        raise UsageError(f"{str(path)!r}: {', '.join(map(repr, not_objects))} must be JSON object(s); {again}")
    problem = _tolerance_problem(data["tolerance"])
    if problem:
        raise UsageError(f"{str(path)!r} has an invalid 'tolerance' ({problem}): {again}")
    if graph is not None:
        refuse_foreign(data, path, graph)
    if model_path is not None and not force:
        digest = graph.sha256 if graph is not None and graph.sha256 else \
            hashlib.sha256(Path(model_path).read_bytes()).hexdigest()
        if digest != data["model"].get("sha256"):
            raise UsageError(
                f"{str(path)!r} was made for another model (sha256 {str(data['model'].get('sha256'))[:12]}..., "
                f"this one is {digest[:12]}...): rerun 'fp16bisect search' on this model, or pass --force"
            )
    return data


def refuse_foreign(data: dict, path: str | Path, graph: Graph) -> None:
    """The one rule for an override file whose model hash differs from ``graph``'s (``check --overrides``,
    ``compare --overrides`` and ``apply`` all read through here): if it names nodes and none of them is in the
    model, it was made for another model, not another version of this one (retrained: same nodes, new weights),
    and is refused, even with ``--force``. A retrained model's file passes here; each command then says so."""
    names = list(dict.fromkeys(n["name"] for n in data["fp32_nodes"]))
    if not names or data["model"].get("sha256", "") == graph.sha256:
        return  # an empty file fits any model; a same-hash file naming absent nodes is the caller's (damaged) case
    if any(n in graph.by_id for n in names):
        return
    model = graph.path.name if graph.path else "this model"
    raise UsageError(
        f"{str(path)} names {len(names)} node(s), none of which is in {model}: it was made for another model; "
        "pass the override file written for this model (or run 'fp16bisect search' on it)"
    )


def _tolerance_problem(t) -> str:
    """What is wrong with a recorded tolerance, or ''. Keys may be missing (then ``apply --verify`` asks for
    --atol and --rtol); a value present must be one 'fp16bisect search' could have written."""
    if not isinstance(t, dict):
        return "not an object"

    def number(key, low, high) -> str:
        value = t.get(key)
        if value is None:
            return ""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            return f"{key} {value!r} is not a number from {low:g} to {high:g}"
        return ""

    return (number("atol", 0, 1e300) or number("rtol", 0, 1e300) or number("min_cosine", -1, 1)
            or number("max_mismatch", 0, 1))


def journal_path(output: str) -> str:
    """Beside the override JSON: overrides.json -> overrides.journal.jsonl."""
    return str(Path(output).with_suffix(".journal.jsonl"))


def recorded_tolerance(data: dict, path: str) -> Tolerance:
    """The tolerance an override file was searched with."""
    t = data.get("tolerance")
    try:
        return Tolerance(float(t["atol"]), float(t["rtol"]),
                         None if t.get("min_cosine") is None else float(t["min_cosine"]),
                         float(t.get("max_mismatch", 0.0)))
    except (TypeError, KeyError, ValueError):
        raise UsageError(f"{path!r} has no valid 'tolerance': pass --atol and --rtol, or rerun 'fp16bisect search'") from None
