"""The Python API of ``kernels``: ``kernel_plan``, the engine's kernel plan of an override file's answer.

Builds the answer's mixed-precision file (what ``apply`` writes) and the all-FP16 file with TensorRT (TensorRT-RTX
builds on a CPU) and says where each FP32 pin and FP32-accumulation node landed (``backends/tensorrt/
kernel_plan.py``). Never a verdict: nothing is run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Union

from fp16bisect.api import inputs
from fp16bisect.api.inputs import Model, OverridesGiven, Progress
from fp16bisect.diagnose.kernel_plan import KernelPlan
from fp16bisect.errors import UsageError
from fp16bisect.model import shapes, weights

if TYPE_CHECKING:
    from fp16bisect.model.graph import Graph

__all__ = ["KernelPlan", "kernel_plan"]

Shapes = Union[str, Mapping, None]  # trtexec's "name:1x3x224x224,..." or {input name: shape}, as Judge's shape fields


def kernel_plan(model: Model, overrides: OverridesGiven, *, fp16_io: bool = False, force: bool = False,
                min_shapes: Shapes = None, opt_shapes: Shapes = None, max_shapes: Shapes = None,
                progress: Progress = None) -> KernelPlan:
    """Build the answer's mixed-precision file and the all-FP16 file with TensorRT and say where each FP32 pin and
    FP32-accumulation node landed in the engine.

    Needs ``tensorrt-rtx`` (builds, without running, on a CPU) or TensorRT (on a GPU); the engines are built, never
    run, and no verdict changes. Each node of the answer gets the kernel it landed in, the model's nodes that
    kernel covers, the data types the kernel reads and writes, and whether the node's output is stored (between
    kernels) or internal to its kernel; a pin is moot where the all-FP16 engine does not compute the node at all;
    a pin splits a kernel where the answer's engine spreads one all-FP16 kernel's nodes over more kernels; and
    TensorRT's warnings that name nodes of the model are kept.

    Args:
        model: The FP32 ONNX model the overrides were searched on: a path or an ``onnx.ModelProto``.
        overrides: An override JSON path, a ``SearchResult``, or the JSON as a dict.
        fp16_io: Write both files with FP16 graph inputs and outputs (``apply --fp16-io``).
        force: Use an override file made for another version of the model (``apply --force``).
        min_shapes: The inputs' shapes to build for (trtexec's ``name:1x3x224x224`` text or a mapping), as
            ``search`` takes them; by default the shapes the override file records (its samples' span, or its
            deployment profile). A model with dynamic input dimensions needs one or the other.
        opt_shapes: As ``min_shapes``: the shapes the engine is tuned for.
        max_shapes: As ``min_shapes``: the largest shapes.
        progress: A function receiving one line of text per stage, or a ``Listener``.

    Returns:
        The kernel plan (``str()`` reads as a report, ``to_dict()`` is its JSON).

    Raises:
        UsageError: Bad input, neither TensorRT nor TensorRT-RTX installed (the message says how to install one),
            or TensorRT could not build a file (its words).

    Examples:
        >>> import fp16bisect
        >>> model = "sample_models/transformer_block.onnx"
        >>> found = fp16bisect.search(model, "sample_models/transformer_block.npz")
        >>> plan = fp16bisect.kernel_plan(model, found)
        >>> [(p.node, p.output) for p in plan.placements]
        [('ln1_square', 'internal'), ('ln1_var', 'internal')]
    """
    from fp16bisect.artifacts.overrides import file_precision, read
    from fp16bisect.diagnose.kernels import kernel_plan_of, tensorrt
    from fp16bisect.model.graph import Graph
    from fp16bisect.model.precision import precision_of

    if overrides is None:
        raise UsageError("kernel_plan needs overrides: pass an override JSON path or a search result")
    given = shapes.profile_of(min_shapes, opt_shapes, max_shapes)
    tensorrt()  # how to install it, before any work
    listener = inputs.listener(progress)
    alive = weights.alive()
    try:
        with inputs.model_file(model) as path, inputs.overrides_file(overrides) as file:
            assert file is not None  # overrides was given (refused above when None)
            graph = Graph.load(path, precision=precision_of(file_precision(file)))
            data = read(file, path, force=force, graph=graph)
            profile = recorded_profile(graph, data.section("shapes") or {}, given or {})
            return kernel_plan_of(graph, data.plan, fp16_io=fp16_io, shapes=profile, timed=listener.timed,
                                  model=str(model) if inputs.is_path(model) else inputs.IN_MEMORY_MODEL,
                                  overrides=str(overrides) if inputs.is_path(overrides) else "the given answer")
    finally:
        weights.close_since(alive)


def recorded_profile(graph: Graph, recorded: dict, given: dict) -> dict[str, tuple]:
    """Input name -> (min, opt, max) shapes to build for: ``given`` (the flags), else the override file's ``shapes``
    section (the deployment profile it records, else the span its samples covered, optimised for the largest),
    its fixed dimensions from the model."""
    profile: dict[str, tuple] = {}
    for spec in graph.inputs:
        dims = {entry["dim"]: entry for entry in recorded.get(spec.name, [])}
        if spec.name in given or not dims or spec.shape is None:
            continue
        sizes = []
        for i, declared in enumerate(spec.shape):
            entry = dims.get(i)
            if entry is not None:
                low, high = entry["covered"]
                sizes.append(tuple(entry.get("profile") or (low, high, high)))
            elif isinstance(declared, int) and declared > 0:
                sizes.append((declared,) * 3)
            else:
                break  # a dynamic dimension the file does not record: the flags must say it
        else:
            profile[spec.name] = tuple(tuple(s[k] for s in sizes) for k in range(3))
    return {**profile, **given}
