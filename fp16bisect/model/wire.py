"""Read an ONNX file without parsing its weights: each inline weight becomes a reference to its own bytes.

An ONNX file is a protobuf ``ModelProto``; its graph (field 7) holds the
initializers (``GraphProto`` field 5), each a ``TensorProto`` whose bytes are
usually one ``raw_data`` field (9). ``skeleton`` walks the file's fields
(https://protobuf.dev/programming-guides/encoding/) and rewrites each such
tensor of at least ``minimum`` bytes as an external one whose ``location`` is the
file itself, at the offset of its ``raw_data``: the same tensor to every ONNX
reader, with none of its bytes copied. The rest of the file (nodes, names,
small tensors) is kept byte for byte, so the result parses to what the file
holds, weights aside. Anything unexpected (a file that is not a well-formed
message, a tensor in another form) is left to ``onnx.load``: ``skeleton``
returns None.
"""

from __future__ import annotations

import mmap

MODEL_GRAPH, GRAPH_INITIALIZER = 7, 5
TENSOR_NAME, TENSOR_RAW, TENSOR_EXTERNAL, TENSOR_LOCATION = 8, 9, 13, 14
LENGTH_DELIMITED = 2


class _Malformed(Exception):
    pass


def _varint(buf, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise _Malformed
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _fields(buf, start: int, end: int):
    """(field number, wire type, start of the field's tag, start of its value, end of its value)."""
    pos = start
    while pos < end:
        tag_start = pos
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, value_end = _varint(buf, pos, end)
            value_start = pos
        elif wire == 1:
            value_start, value_end = pos, pos + 8
        elif wire == LENGTH_DELIMITED:
            size, value_start = _varint(buf, pos, end)
            value_end = value_start + size
        elif wire == 5:
            value_start, value_end = pos, pos + 4
        else:
            raise _Malformed
        if value_end > end or number == 0:
            raise _Malformed
        yield number, wire, tag_start, value_start, value_end
        pos = value_end


def _delimited(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | LENGTH_DELIMITED) + _encode_varint(len(payload)) + payload


def _external(location: str, offset: int, length: int) -> bytes:
    entries = [("location", location), ("offset", str(offset)), ("length", str(length))]
    out = b"".join(_delimited(TENSOR_EXTERNAL, _delimited(1, k.encode()) + _delimited(2, v.encode()))
                   for k, v in entries)
    return out + _encode_varint(TENSOR_LOCATION << 3) + _encode_varint(1)  # data_location: EXTERNAL


def _tensor(buf, start: int, end: int, location: str, minimum: int) -> bytes | None:
    """The tensor rewritten to refer to its raw_data in the file, or None to keep it as it is."""
    raw = None
    for number, wire, _tag, value_start, value_end in _fields(buf, start, end):
        if number in (TENSOR_EXTERNAL, TENSOR_LOCATION):
            return None  # already external (or half so): onnx's own reading applies
        if number == TENSOR_RAW and wire == LENGTH_DELIMITED:
            raw = (_tag, value_start, value_end)
    if raw is None or raw[2] - raw[1] < minimum:
        return None
    tag, value_start, value_end = raw
    kept = bytes(buf[start:tag]) + bytes(buf[value_end:end])
    return kept + _external(location, value_start, value_end - value_start)


def skeleton(path: str, minimum: int) -> bytes | None:
    """The bytes of the model at ``path`` with its inline weights of at least ``minimum`` bytes made references
    to themselves in the file (absolute ``location``: ``path``); None if it cannot be read this way."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _rewrite(buf, path, minimum)
    except (_Malformed, ValueError, OSError):
        return None


def _rewrite(buf, location: str, minimum: int) -> bytes:
    end = len(buf)
    parts: list[bytes] = []
    done = 0
    for number, wire, tag, value_start, value_end in _fields(buf, 0, end):
        if number != MODEL_GRAPH or wire != LENGTH_DELIMITED:
            continue
        graph = bytearray()
        copied = value_start
        for g_number, g_wire, g_tag, g_start, g_end in _fields(buf, value_start, value_end):
            if g_number != GRAPH_INITIALIZER or g_wire != LENGTH_DELIMITED:
                continue
            tensor = _tensor(buf, g_start, g_end, location, minimum)
            if tensor is None:
                continue
            graph += buf[copied:g_tag]
            graph += _delimited(GRAPH_INITIALIZER, tensor)
            copied = g_end
        graph += buf[copied:value_end]
        parts += [bytes(buf[done:tag]), _delimited(MODEL_GRAPH, bytes(graph))]
        done = value_end
    parts.append(bytes(buf[done:end]))
    return b"".join(parts)


def write_inline(model, out, raw_of, is_external) -> None:
    """Serialise ``model`` to file ``out`` with its external initializers inline (``raw_data``), each one's bytes
    (``raw_of(tensor)``: a buffer, e.g. a memory map) written straight from its buffer: the file ``onnx.load``
    reads as the model with its weights, made with no copy of them in memory."""
    from onnx import ModelProto, TensorProto

    rest = ModelProto()
    rest.CopyFrom(model)  # a skeleton: cheap
    tensors = list(rest.graph.initializer)
    del rest.graph.initializer[:]
    graph = rest.graph.SerializeToString()
    rest.ClearField("graph")
    parts = []
    for t in tensors:
        raw = None
        if is_external(t):
            head = TensorProto()
            head.CopyFrom(t)
            del head.external_data[:]
            head.ClearField("data_location")
            raw = memoryview(raw_of(t)).cast("B")
            body = head.SerializeToString()
            size = len(body) + len(_encode_varint(TENSOR_RAW << 3 | LENGTH_DELIMITED)) \
                + len(_encode_varint(len(raw))) + len(raw)
        else:
            body = t.SerializeToString()
            size = len(body)
        parts.append((body, raw, size))
    tag = _encode_varint(GRAPH_INITIALIZER << 3 | LENGTH_DELIMITED)
    graph_size = len(graph) + sum(len(tag) + len(_encode_varint(size)) + size for _, _, size in parts)
    out.write(rest.SerializeToString())
    out.write(_encode_varint(MODEL_GRAPH << 3 | LENGTH_DELIMITED) + _encode_varint(graph_size))
    out.write(graph)
    for body, raw, size in parts:
        out.write(tag + _encode_varint(size) + body)
        if raw is not None:
            out.write(_encode_varint(TENSOR_RAW << 3 | LENGTH_DELIMITED) + _encode_varint(len(raw)))
            out.write(raw)
