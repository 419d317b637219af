"""A TensorRT build log as text -> the engine's kernels and TensorRT's warnings (pure text: no TensorRT here).

With ``ProfilingVerbosity.DETAILED`` and a verbose logger, TensorRT-RTX's builder prints the engine's layer list at
the end of a build, one line a kernel (``IEngineInspector`` needs a GPU, this list does not)::

    Layers:
    Name: __myl_AddMulMeanCast_myl0_7, LayerType: kgen, Inputs: [ { Name: ..., Dimensions: [1,16,64], ...,
    Datatype: Half, Format: ... }], Constants: [...], Outputs: [...], TacticName: ..., StreamId: 0,
    Metadata: [ONNX Layer: ln1_mean][ONNX Layer: ln1_var]...

The log is TensorRT's messages in order, each opening with its severity as Polygraphy's logger writes it: ``[E]``
(errors), ``[W]`` (warnings), ``[V]`` (TensorRT's INFO), ``[X]`` (its VERBOSE). An entry may hold several lines (a
multi-line message, or a whole log); a line with no severity continues the message before it (Polygraphy indents
those). A log with no severity anywhere is read one entry a message, and has no warnings.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass

from fp16bisect.backends.tensorrt.inspection import metadata_nodes, tensor_kind

LAYERS = "Layers:"
_SEVERITY = re.compile(r"\[([A-Z!])\] ?")
_TENSOR = re.compile(r"\{ Name: (.*?), Dimensions: (\[[^\]]*\]).*?Datatype: (\w+)")
_AFTER_OUTPUTS = re.compile(r"\], (?:TacticName|TacticValue|StreamId|Metadata):")
_GENERATED = re.compile(r"^__myl_(.+?)_myl\d+_\d+$")  # a kernel Myelin generated, named after its ops
_LIST = re.compile(r"^[^\s,]+(?:,[^\s,]+)*$")  # "ln1_mean,ln1_var": the nodes a warning's next message lists


@dataclass(frozen=True)
class Tensor:
    """A tensor a kernel reads, holds as a constant or writes: its name in the engine, its shape as printed and its
    data type ("float16", "float32", "bfloat16" or TensorRT's word, e.g. "Int32")."""

    name: str
    shape: str
    dtype: str


@dataclass(frozen=True)
class Kernel:
    """One line of the engine's layer list: a kernel, what it reads and writes, and the ONNX layers it covers
    (``nodes``: the names TensorRT gives the layers of the ONNX nodes, from its metadata)."""

    name: str
    layer_type: str
    inputs: tuple[Tensor, ...]
    constants: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    tactic: str
    nodes: tuple[str, ...]

    @property
    def ops(self) -> tuple[str, ...] | None:
        """The operations of a kernel Myelin generated, from its name (``__myl_MeanSubCastMul_myl0_7`` -> Mean,
        Sub, Cast, Mul); None for other kernels (GEMM, convolution, fused attention), whose names say nothing."""
        found = _GENERATED.match(self.name)
        return tuple(re.findall(r"[A-Z][a-z0-9]*", found.group(1))) if found else None


@dataclass(frozen=True)
class LoggedWarning:
    """A warning TensorRT logged, and the names listed in the message right after it (TensorRT-RTX names the
    layers a warning is about there: "Detected layernorm nodes in FP16." then "ln1_mean,ln1_var")."""

    text: str
    listed: tuple[str, ...] = ()


@dataclass(frozen=True)
class BuildLog:
    """What one build's log says: the engine's kernels (the ``Layers:`` list) and the warnings."""

    kernels: tuple[Kernel, ...]
    warnings: tuple[LoggedWarning, ...]


class NoLayerList(ValueError):
    """The log has no ``Layers:`` list (no DETAILED profiling verbosity, no verbose logger, or a TensorRT that
    prints none)."""


def messages(log: Iterable[str]) -> list[tuple[str, str]]:
    """(severity letter, text) of each message of the log; "" where the log gives no severity."""
    entries = [str(e) for e in log]
    prefixed = any(_SEVERITY.match(line) for e in entries for line in e.split("\n"))
    found: list[tuple[str, str]] = []
    for entry in entries:
        if not prefixed:
            found.append(("", entry))
            continue
        for line in entry.split("\n"):
            head = _SEVERITY.match(line)
            if head:
                found.append((head.group(1), line[head.end():]))
            elif found:
                found[-1] = (found[-1][0], f"{found[-1][1]}\n{line.strip()}")
            else:
                found.append(("", line.strip()))
    return found


def parse(log: Iterable[str]) -> BuildLog:
    """The kernels and warnings of a build's log; ``NoLayerList`` when it has no layer list."""
    said = messages(log)
    listings = [text for _severity, text in said if text.startswith(LAYERS)]
    if not listings:
        raise NoLayerList("the build log has no engine layer list ('Layers:')")
    lines = listings[-1].split("\n")[1:]
    kernels = tuple(kernel(line) for line in itertools.takewhile(lambda line: line.startswith("Name: "), lines))
    warnings: dict[LoggedWarning, None] = {}
    for i, (severity, text) in enumerate(said):
        if severity != "W":
            continue
        after = said[i + 1] if i + 1 < len(said) else ("", "")
        listed = tuple(after[1].split(",")) if after[0] != "W" and _LIST.match(after[1]) else ()
        warnings[LoggedWarning(text.strip(), listed)] = None
    return BuildLog(kernels, tuple(warnings))


def kernel(line: str) -> Kernel:
    """One ``Name: ...`` line of the layer list."""
    name = line[len("Name: "):line.index(", LayerType: ")] if ", LayerType: " in line else line[len("Name: "):]
    layer_type = _field(line, "LayerType")
    head, _, tail = line.partition(", Outputs: [")
    inputs, _, constants = head.partition("Inputs: [")[2].partition("], Constants: [")
    outputs = _AFTER_OUTPUTS.split(tail, maxsplit=1)[0]
    metadata = line.split(", Metadata: ", 1)[1] if ", Metadata: " in line else ""
    return Kernel(name, layer_type, _tensors(inputs), _tensors(constants), _tensors(outputs),
                  _field(line, "TacticName"), metadata_nodes(metadata))


def _field(line: str, key: str) -> str:
    found = re.search(rf", {key}: ([^,]*)", line)
    return found.group(1).strip() if found else ""


def _tensors(text: str) -> tuple[Tensor, ...]:
    return tuple(Tensor(name, shape, tensor_kind(dtype)) for name, shape, dtype in _TENSOR.findall(text))
