"""Hostile input (issue 5, part 4): malformed npz, ONNX and override files.

Every command that reads a file (search, check, scan, compare, apply) is run in-process on generated files.
Invalid input exits 2 with exactly one line ``fp16bisect: error: ...`` on stderr (-q: no progress lines), never
a traceback, never exit 1 from an internal error; valid input exits with the command's own codes. Nothing is
written anywhere but the requested output paths: each example runs in a fresh sandbox (cwd several levels deep,
so that a name like ``../../etc/passwd`` turned into a path would land inside it) that is listed before and
after.

Which generated inputs are valid is decided here, independently of the code under test: numpy and ONNX
Runtime are asked directly (see ``npz_verdict``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import SAMPLES, F, make_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper, numpy_helper

from fp16bisect.cli.main import main

MODEL = SAMPLES / "log_underflow.onnx"  # input x: float32 [4, 32]; output nll
GOOD_NPZ = SAMPLES / "log_underflow.npz"
X = np.load(GOOD_NPZ)["x"]
# FP16BISECT_FUZZ_EXAMPLES=2000 explores further, with fresh random examples each run.
EXPLORE = int(os.environ.get("FP16BISECT_FUZZ_EXAMPLES", "0"))
FUZZ = settings(max_examples=EXPLORE or 25, deadline=None, derandomize=not EXPLORE,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])

# Exit codes a command may give on valid input: search 0 (found or nothing to do) or 3 (tolerance unreachable);
# check 0/1/3; scan and compare 0; apply 0.
VALID = {"search": {0, 3}, "check": {0, 1, 3}, "scan": {0}, "compare": {0}, "apply": {0}}


# -- running the CLI in a sandbox ----------------------------------------------------------------------------------

@dataclass
class Sandbox:
    root: Path
    inputs: Path = field(init=False)
    out: Path = field(init=False)
    cwd: Path = field(init=False)

    def __post_init__(self):
        self.inputs, self.out = self.root / "in", self.root / "out"
        self.cwd = self.root / "deep" / "a" / "b" / "c" / "cwd"
        for d in (self.inputs, self.out, self.cwd):
            d.mkdir(parents=True)

    def write(self, name: str, data: bytes) -> Path:
        path = self.inputs / name
        path.write_bytes(data)
        return path

    def listing(self) -> set[Path]:
        return {p.relative_to(self.root) for p in self.root.rglob("*")}


@contextlib.contextmanager
def sandbox():
    with tempfile.TemporaryDirectory(prefix="fp16bisect-hostile-") as tmp:
        box = Sandbox(Path(tmp))
        here = os.getcwd()
        os.chdir(box.cwd)
        try:
            yield box
        finally:
            os.chdir(here)


def outputs_of(command: str, box: Sandbox) -> tuple[list[str], set[Path]]:
    """Arguments naming the command's output files, and the files it may create (relative to the sandbox;
    patterns)."""
    out = box.out
    if command == "search":
        return ["-o", str(out / "o.json"), "-q"], {Path("out/o.json"), Path("out/o.journal-*.jsonl")}
    if command == "check":
        return ["--json", str(out / "check.json"), "-q"], {Path("out/check.json")}
    if command == "scan":
        return ["--json", str(out / "scan.json"), "-q"], {Path("out/scan.json")}
    if command == "compare":
        return ["--csv", str(out / "cmp.csv"), "-q"], {Path("out/cmp.csv")}
    return ["-o", str(out / "mixed.onnx")], {Path("out/mixed.onnx")}


def run(capsys, box: Sandbox, command: str, argv: list) -> tuple[int, str]:
    """Run one command in the sandbox; check the invariants every run must keep; return (code, stderr)."""
    extra, allowed = outputs_of(command, box)
    repo_before = {p.name for p in SAMPLES.iterdir()}
    before = box.listing()
    capsys.readouterr()
    code = main([command, *map(str, argv), *extra])
    _, err = capsys.readouterr()
    created = box.listing() - before
    assert "Traceback" not in err and "internal error" not in err, err
    assert code in {0, 1, 2, 3}, (code, err)
    if code == 1:
        assert command == "check", f"{command} exited 1: {err}"
    if code == 2:
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("fp16bisect: error: "), err
        assert not created, f"refused, yet wrote {sorted(map(str, created))}"
    outside = {p for p in created if not any(p.match(str(pattern)) for pattern in allowed)}  # the journal's key
    assert not outside, f"files outside the requested outputs: {sorted(map(str, outside))}"
    assert not any(box.cwd.iterdir()) and {p.name for p in SAMPLES.iterdir()} == repo_before
    return code, err


def assert_refused(code: int, err: str, *words: str) -> None:
    assert code == 2, err
    for word in words:
        assert word.lower() in err.lower(), (word, err)


# -- (a) npz files -------------------------------------------------------------------------------------------------

def npz_bytes(arrays: dict) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


GOOD_BYTES = GOOD_NPZ.read_bytes()


def fp32_output(x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def npz_verdict(data: bytes) -> str:
    """What the file is, decided without fp16bisect: 'invalid', 'valid', or 'nan-reference' (valid as a file, but
    the model's FP32 output has NaN on it: search, check and compare must refuse it, scan may run)."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except Exception:
        return "invalid"
    x = arrays.get("x")
    if set(arrays) != {"x"} or x.dtype != np.float32 or x.shape != (4, 32) or np.isnan(x).any():
        return "invalid"
    return "nan-reference" if np.isnan(fp32_output(x)).any() else "valid"


NAMES = st.one_of(st.sampled_from(["y", "X", "x ", "../x", "x.npy", "input", "nll", "a/b", "\u00e9"]),
                  st.text(st.characters(codec="utf-8", exclude_characters="\x00/"), min_size=1, max_size=12))
DTYPES = st.sampled_from([np.float32, np.float64, np.float16, np.int32, np.int64, np.uint8, np.bool_,
                          np.complex64, "U3", "S3"])
SHAPES = st.sampled_from([(4, 32), (32,), (1, 4, 32), (), (4, 31), (5, 32), (0, 32), (4, 0), (32, 4)])


@st.composite
def hostile_arrays(draw) -> bytes:
    """An npz of arrays with the right or wrong names, dtypes, shapes and values."""
    shape = draw(SHAPES)
    dtype = draw(st.one_of(st.just(np.float32), DTYPES))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    values = rng.normal(0, 3, size=shape)
    special = draw(st.sampled_from(["none", "nan", "inf", "-inf", "all-inf", "huge"]))
    if values.size:
        flat = values.reshape(-1)
        where = rng.integers(0, flat.size, size=draw(st.integers(1, 3)))
        flat[where] = {"none": flat[where], "nan": np.nan, "inf": np.inf, "-inf": -np.inf,
                       "all-inf": np.inf, "huge": 1e30}[special]
        if special == "all-inf":
            flat[:] = np.inf
    with np.errstate(invalid="ignore", over="ignore"):
        array = values.astype(dtype) if dtype not in ("U3", "S3") else values.astype(str).astype(dtype)
    names = draw(st.sampled_from(["x", "wrong", "x+extra", "none"]))
    arrays = {"x": array} if names == "x" else {}
    if names in ("wrong", "x+extra"):
        other = draw(NAMES.filter(lambda n: n != "x"))
        arrays[other] = array
        if names == "x+extra":
            arrays["x"] = array
    return npz_bytes(arrays)


def huge_header(shape: tuple, dtype: str = "<f4", payload: int = 16) -> bytes:
    """An npz whose array header declares ``shape`` but holds ``payload`` bytes of data."""
    npy = io.BytesIO()
    np.lib.format.write_array_header_1_0(npy, {"descr": dtype, "fortran_order": False, "shape": shape})
    npy.write(b"\0" * payload)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("x.npy", npy.getvalue())
    return buf.getvalue()


def pickled_objects() -> bytes:
    return npz_bytes({"x": np.array([object(), 1], dtype=object)})


def unknown(files):
    """Files whose verdict npz_verdict decides."""
    return files.map(lambda data: (data, None))


NPZ_FILES = st.one_of(unknown(st.one_of(
    st.binary(max_size=200),
    st.binary(max_size=200).map(lambda b: b"PK\x03\x04" + b),
    st.binary(max_size=100).map(lambda b: b"\x93NUMPY" + b),
    st.integers(0, len(GOOD_BYTES) - 1).map(lambda k: GOOD_BYTES[:k]),  # truncated at a random offset
    st.tuples(st.integers(0, len(GOOD_BYTES) - 1), st.integers(1, 255)).map(  # one byte corrupted
        lambda t: GOOD_BYTES[:t[0]] + bytes([GOOD_BYTES[t[0]] ^ t[1]]) + GOOD_BYTES[t[0] + 1:]),
    hostile_arrays(),
    st.just(huge_header((4, 32), payload=100)),  # cut short: 100 of 512 bytes
    st.builds(pickled_objects),
)),  # headers declaring terabytes: not loaded here either
    st.sampled_from([(2**40, 2**20), (4, 2**40), (4, 32, 10**9), (10**12,)]).map(lambda s: (huge_header(s), "invalid")),
)


@FUZZ
@given(file=NPZ_FILES, command=st.sampled_from(["search", "check", "scan", "compare"]))
def test_fuzz_npz_inputs(capsys, file, command):
    data, verdict = file
    verdict = verdict or npz_verdict(data)
    with sandbox() as box:
        path = box.write("x.npz", data)
        code, err = run(capsys, box, command, [MODEL, "--inputs", path])
    if verdict == "invalid":
        assert_refused(code, err)
    elif verdict == "nan-reference" and command != "scan":
        assert_refused(code, err, "NaN")
    else:
        assert code in VALID[command], err


@FUZZ
@given(file=NPZ_FILES, names=st.sampled_from(["nll", "nll+extra", "x"]))
def test_fuzz_npz_references(capsys, file, names):
    """--reference files: one array per output, keyed by its name (extra arrays are ignored)."""
    data, verdict = file
    if verdict is None and names != "x":  # the same files, with the arrays renamed as the output
        with contextlib.suppress(Exception), np.load(io.BytesIO(data), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
            if "x" in arrays:
                arrays["nll"] = arrays.pop("x")
                data = npz_bytes({**arrays, **({"x": X} if names == "nll+extra" else {})})
    with sandbox() as box:
        ref = box.write("r.npz", data)
        code, err = run(capsys, box, "check", [MODEL, "--inputs", GOOD_NPZ, "--reference", ref])
    nll = None
    if verdict is None:
        with contextlib.suppress(Exception), np.load(io.BytesIO(data), allow_pickle=False) as z:
            nll = z["nll"]
    if nll is None or nll.dtype != np.float32 or nll.shape != (4, 16) or np.isnan(nll).any():
        assert_refused(code, err)
    else:
        assert code in VALID["check"], err


# -- (b) ONNX files ------------------------------------------------------------------------------------------------

def small(nodes, outputs=(("y", F, [2, 8]),), opset=17, inits=()):
    return make_model(nodes, [("x", F, [2, 8])], list(outputs), dict(inits), opset=opset)


def cycle(k: int) -> onnx.ModelProto:
    """k nodes in a ring (k = 1: a node that reads its own output)."""
    names = [f"t{i}" for i in range(k)]
    nodes = [helper.make_node("Add", ["x", names[i - 1]], [names[i]], name=f"n{i}") for i in range(k)]
    return small(nodes, [(names[-1], F, [2, 8])])


def with_ir(version: int) -> onnx.ModelProto:
    model = small([helper.make_node("Relu", ["x"], ["y"], name="r")])
    model.ir_version = version
    return model


def with_opset(version: int) -> onnx.ModelProto:
    return small([helper.make_node("Relu", ["x"], ["y"], name="r")], opset=version)


def custom_only() -> onnx.ModelProto:
    model = small([helper.make_node("Relu", ["x"], ["y"], name="r")])
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    return model


def corrupt_initializer() -> onnx.ModelProto:
    model = small([helper.make_node("Mul", ["x", "w"], ["y"], name="m")], inits={"w": np.ones((2, 8), np.float32)})
    model.graph.initializer[0].raw_data = model.graph.initializer[0].raw_data[:7]
    return model


def untyped_input() -> onnx.ModelProto:
    model = small([helper.make_node("Relu", ["x"], ["y"], name="r")])
    model.graph.input[0].type.Clear()
    return model


def non_utf8(where: str) -> onnx.ModelProto:
    """A node name, op type or tensor name that is not UTF-8 (protobuf reads it back as bytes)."""
    model = small([helper.make_node("Relu", ["x"], ["yy"], name="NAME"),
                   helper.make_node("Sigmoid", ["yy"], ["y"], name="sig")])
    placeholder = {"name": b"NAME", "tensor": b"yy", "op": b"Relu"}[where]
    data = model.SerializeToString().replace(placeholder, b"\xff\xfe" + placeholder[2:])
    return onnx.load_model_from_string(data)


BROKEN_MODELS = {
    "non-UTF-8 node name": lambda: non_utf8("name"),
    "non-UTF-8 tensor name": lambda: non_utf8("tensor"),
    "non-UTF-8 op type": lambda: non_utf8("op"),
    "empty graph": lambda: small([]),
    "empty graph, no outputs": lambda: small([], outputs=()),
    "no outputs": lambda: small([helper.make_node("Relu", ["x"], ["y"], name="r")], outputs=()),
    "missing input": lambda: small([helper.make_node("Add", ["x", "nowhere"], ["y"], name="a")]),
    "output never produced": lambda: small([helper.make_node("Relu", ["x"], ["z"], name="r")]),
    "unknown op": lambda: small([helper.make_node("Frobnicate", ["x"], ["y"], name="f")]),
    "empty op type": lambda: small([helper.make_node("", ["x"], ["y"], name="e")]),
    "two producers": lambda: small([helper.make_node("Relu", ["x"], ["y"], name="a"),
                                    helper.make_node("Sigmoid", ["x"], ["y"], name="b")]),
    "bad attribute": lambda: small([helper.make_node("Softmax", ["x"], ["y"], name="s", axis=9)]),
    "incompatible shapes": lambda: small([helper.make_node("MatMul", ["x", "x"], ["y"], name="mm")]),
    "corrupt initializer": corrupt_initializer,
    "untyped input": untyped_input,
    "custom domain only": custom_only,
}

SAMPLE_BYTES = {name: (SAMPLES / f"{name}.onnx").read_bytes() for name in ("log_underflow", "two_branches")}


@st.composite
def hostile_models(draw) -> tuple[bytes, str]:
    """(bytes, npz to pair it with): each is a model every command must refuse."""
    kind = draw(st.sampled_from(["random", "truncated", "cycle", "ir", "opset", "broken"]))
    xin = "small"
    if kind == "random":
        data = draw(st.binary(max_size=400))
    elif kind == "truncated":
        name = draw(st.sampled_from(sorted(SAMPLE_BYTES)))
        whole = SAMPLE_BYTES[name]
        data, xin = whole[:draw(st.integers(0, len(whole) - 1))], name
    elif kind == "cycle":
        data = cycle(draw(st.integers(1, 4))).SerializeToString()
    elif kind == "ir":
        data = with_ir(draw(st.sampled_from([0, -1, -(2**40), 10**6]))).SerializeToString()
    elif kind == "opset":
        newest = onnx.defs.onnx_opset_version()
        version = draw(st.one_of(st.integers(-5, 0), st.integers(newest + 1, 10**6)))
        data = with_opset(version).SerializeToString()
    else:
        data = BROKEN_MODELS[draw(st.sampled_from(sorted(BROKEN_MODELS)))]().SerializeToString()
    return data, xin


def inputs_for(box: Sandbox, xin: str) -> Path:
    if xin != "small":
        return SAMPLES / f"{xin}.npz"
    path = box.inputs / "x.npz"
    np.savez(path, x=np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8))
    return path


@pytest.fixture(scope="module")
def override_file(tmp_path_factory) -> dict:
    """A real override file for MODEL (searched once)."""
    out = tmp_path_factory.mktemp("good") / "overrides.json"
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        assert main(["search", str(MODEL), "--inputs", str(GOOD_NPZ), "-o", str(out), "-q"]) == 0
    return json.loads(out.read_text())


@FUZZ
@given(model=hostile_models(), command=st.sampled_from(["search", "check", "scan", "compare", "apply"]))
def test_fuzz_models_are_refused(capsys, override_file, model, command):
    data, xin = model
    with sandbox() as box:
        path = box.write("model.onnx", data)
        x = inputs_for(box, xin)
        if command == "apply":
            argv = [box.write("o.json", json.dumps(override_file).encode()), path, "--force"]
        else:
            argv = [path, "--inputs", x]
        code, err = run(capsys, box, command, argv)
    assert_refused(code, err)


@settings(FUZZ, max_examples=EXPLORE or 15)
@given(offset=st.integers(0, len(SAMPLE_BYTES["log_underflow"]) - 1), flip=st.integers(1, 255),
       command=st.sampled_from(["search", "check", "scan", "compare"]))
def test_fuzz_corrupted_model_bytes(capsys, offset, flip, command):
    """One byte of a real model changed: a weight may simply change (valid model), or the file breaks; never a
    traceback, an internal error or a stray file (the invariants ``run`` checks)."""
    whole = SAMPLE_BYTES["log_underflow"]
    data = whole[:offset] + bytes([whole[offset] ^ flip]) + whole[offset + 1:]
    with sandbox() as box:
        run(capsys, box, command, [box.write("model.onnx", data), "--inputs", GOOD_NPZ])


def test_truncations_lose_the_opset_so_none_is_valid():
    """The premise of the truncation cases: a sample model's last field is opset_import, so no prefix of it
    is a whole model."""
    for whole in SAMPLE_BYTES.values():
        fields = [f.name for f, _ in onnx.load_model_from_string(whole).ListFields()]
        assert fields[-1] == "opset_import"


# -- (c) override files --------------------------------------------------------------------------------------------

HOSTILE_NAMES = st.one_of(
    st.sampled_from(["../../etc/passwd", "/etc/passwd", "..", ".", "", " ", "a/b", "..\\..\\x", "C:\\evil",
                     "a\x00b", "\x00", "x" * 5000, "\u202egnp.evil", "nll", "out/o.json", "~/.bashrc"]),
    st.text(max_size=30),
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
REQUIRED = ("schema", "model", "backend", "tolerance", "fp32_nodes", "search", "metrics", "exports")


def pinnable_ids() -> set[str]:
    """Nodes an override file may name: those with a float output."""
    from fp16bisect.model.graph import Graph

    graph = Graph.load(MODEL)
    return {n.id for n in graph.nodes if graph.float_outputs(n)}


PINNABLE = pinnable_ids()


def node_ids() -> set[str]:
    from fp16bisect.model.graph import Graph

    return {n.id for n in Graph.load(MODEL).nodes}


NODE_IDS = node_ids()


@st.composite
def hostile_overrides(draw, base: dict) -> tuple[bytes, str]:
    """(file bytes, expectation): 'invalid' (every reader refuses it), 'names' (well formed, and the node names
    decide), or 'valid'."""
    kind = draw(st.sampled_from(["bytes", "non-utf8", "not-object", "missing", "wrong-type", "tolerance",
                                 "names", "names", "names"]))
    data = json.loads(json.dumps(base))
    if kind == "bytes":
        return draw(st.binary(max_size=200)), "invalid"
    if kind == "non-utf8":
        text = json.dumps(base).encode()
        at = draw(st.integers(0, len(text)))
        bad = draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\x80", b"\xed\xa0\x80", "\u00e9".encode("latin-1")]))
        return text[:at] + bad + text[at:], "invalid"
    if kind == "not-object":
        return json.dumps(draw(JSON_VALUES.filter(lambda v: not isinstance(v, dict)))).encode(), "invalid"
    if kind == "missing":
        for key in draw(st.lists(st.sampled_from(REQUIRED), min_size=1, unique=True)):
            del data[key]
    elif kind == "wrong-type":
        key = draw(st.sampled_from(REQUIRED))
        data[key] = draw(JSON_VALUES.filter(lambda v: not isinstance(v, dict if key not in ("fp32_nodes",)
                                                                          else list) and v != base[key]))
    elif kind == "tolerance":
        key = draw(st.sampled_from(["atol", "rtol", "min_cosine", "max_mismatch"]))
        data["tolerance"][key] = draw(st.sampled_from([-1.5, "0.1", [], {}, True, 1e301, float("inf"),
                                                       float("nan")]))  # wrong for every key
    else:
        names = draw(st.lists(st.one_of(HOSTILE_NAMES, st.sampled_from(sorted(PINNABLE))), max_size=4))
        data["fp32_nodes"] = [{"name": n, "op_type": "Mul", "outputs": [n]} for n in names]
        if draw(st.booleans()):
            data["model"]["sha256"] = "0" * 64  # made for another version of the model
        text = json.dumps(data, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")
        return text, "names"
    return json.dumps(data).encode(), "invalid"


@FUZZ
@given(data=st.data(), command=st.sampled_from(["apply", "apply-force", "check", "compare"]))
def test_fuzz_override_files(capsys, override_file, data, command):
    raw, expect = data.draw(hostile_overrides(override_file))
    with sandbox() as box:
        path = box.write("o.json", raw)
        if command.startswith("apply"):
            argv = [path, MODEL] + (["--force"] if command == "apply-force" else [])
        else:
            argv = [MODEL, "--inputs", GOOD_NPZ, "--overrides", path]
        command = command.split("-")[0]
        code, err = run(capsys, box, command, argv)  # also: nothing written but the output (so no name became a path)
    if expect == "invalid":
        assert_refused(code, err)
        return
    try:
        parsed = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:  # a lone surrogate: not UTF-8
        assert_refused(code, err)
        return
    names = {n["name"] for n in parsed["fp32_nodes"]}
    same_model = parsed["model"]["sha256"] == override_file["model"]["sha256"]
    known = names <= PINNABLE
    if names and not same_model and not names & NODE_IDS:
        assert_refused(code, err, "none of which is in")  # another model's file, whatever the command or --force
    elif known and (same_model or command in ("check", "compare") or "--force" in argv):
        assert code in VALID[command], err
    elif command == "apply" or same_model:
        assert_refused(code, err)  # another model's file (apply without --force), or nodes the model lacks
    else:
        assert code in VALID[command], err  # another version's file: the nodes still present are checked


# -- plain regression tests for what the fuzzing found ------------------------------------------------------------

@pytest.fixture
def box(tmp_path, monkeypatch):
    b = Sandbox(tmp_path)
    monkeypatch.chdir(b.cwd)
    return b


@pytest.mark.parametrize("shape", [(2**40, 2**20), (10**12,)])
def test_npz_declaring_a_huge_array_is_refused_without_allocating_it(capsys, box, shape):
    """Was: MemoryError (exit 1, 'out of memory') while numpy allocated terabytes for a 200-byte file."""
    path = box.write("x.npz", huge_header(shape))
    code, err = run(capsys, box, "check", [MODEL, "--inputs", path])
    assert_refused(code, err, "truncated or corrupt", "declares shape")


def test_npz_of_random_bytes_says_it_is_not_a_zip(capsys, box):
    """Was: numpy's 'pickled (object) data ... allow_pickle' advice, which is wrong for a file of garbage."""
    code, err = run(capsys, box, "scan", [MODEL, "--inputs", box.write("x.npz", b"\x01garbage" * 9)])
    assert_refused(code, err, "not a zip archive")
    assert "pickle" not in err


def test_nan_in_an_input_is_refused_unless_the_model_tests_for_nan(capsys, box):
    """Was: scan ran on it (exit 0) and search/check blamed the reference."""
    x = X.copy()
    x[0, 3] = np.nan
    path = box.inputs / "nan.npz"
    np.savez(path, x=x)
    for command in ("scan", "search", "check", "compare"):
        code, err = run(capsys, box, command, [MODEL, "--inputs", path])
        assert_refused(code, err, "input 'x'", "1 NaN value(s)", "IsNaN")
    nodes = [helper.make_node("IsNaN", ["x"], ["isnan"], name="isnan"),
             helper.make_node("Constant", [], ["zero"], name="zero", value=numpy_helper.from_array(np.float32(0))),
             helper.make_node("Where", ["isnan", "zero", "x"], ["clean"], name="where"),
             helper.make_node("Mul", ["clean", "clean"], ["y"], name="square")]
    masked = box.inputs / "masked.onnx"
    onnx.save(make_model(nodes, [("x", F, [4, 32])], [("y", F, [4, 32])]), masked)
    code, err = run(capsys, box, "check", [masked, "--inputs", path])
    assert code == 0, err


def test_inf_in_an_input_is_data_when_the_model_masks_it(capsys, box):
    """An attention mask of -inf is a legitimate input; one that makes the FP32 output NaN is named."""
    nodes = [helper.make_node("Add", ["x", "mask"], ["logits"], name="add_mask"),
             helper.make_node("Softmax", ["logits"], ["y"], name="softmax", axis=-1)]
    model = box.inputs / "masked.onnx"
    onnx.save(make_model(nodes, [("x", F, [2, 4]), ("mask", F, [2, 4])], [("y", F, [2, 4])]), model)
    mask = np.zeros((2, 4), np.float32)
    mask[:, 2:] = -np.inf
    good = box.inputs / "good.npz"
    np.savez(good, x=np.ones((2, 4), np.float32), mask=mask)
    code, err = run(capsys, box, "check", [model, "--inputs", good])
    assert code == 0, err
    mask[1, :] = -np.inf  # a row masked out entirely: softmax of all -inf is NaN
    bad = box.inputs / "bad.npz"
    np.savez(bad, x=np.ones((2, 4), np.float32), mask=mask)
    code, err = run(capsys, box, "search", [model, "--inputs", bad])
    assert_refused(code, err, "contains NaN", "input 'mask' holds NaN or inf")


@pytest.mark.parametrize("version", [0, -1])
def test_model_without_an_ir_version_is_refused(capsys, box, version):
    """Was: check, scan and compare ran (ONNX Runtime accepts it); apply then failed onnx.checker: exit 1."""
    path = box.write("m.onnx", with_ir(version).SerializeToString())
    for command in ("scan", "check"):
        code, err = run(capsys, box, command, [path, "--inputs", inputs_for(box, "small")])
        assert_refused(code, err, "IR version")


@pytest.mark.parametrize("make, words", [
    (lambda: with_opset(onnx.defs.onnx_opset_version() + 1), ("opset", "installed onnx")),
    (lambda: with_opset(0), ("opset 0",)),
    (custom_only, ("no opset for the default ONNX domain",)),
])
def test_model_with_an_unusable_opset_is_refused_in_our_words(capsys, box, make, words):
    path = box.write("m.onnx", make().SerializeToString())
    code, err = run(capsys, box, "compare", [path, "--inputs", inputs_for(box, "small")])
    assert_refused(code, err, *words)
    assert "onnxruntime_src" not in err


def test_model_truncated_after_its_graph_says_it_may_be_truncated(capsys, box):
    whole = SAMPLE_BYTES["log_underflow"]
    model = onnx.load_model_from_string(whole)
    del model.opset_import[:]
    cut = model.SerializeToString()
    assert whole.startswith(cut)
    code, err = run(capsys, box, "scan", [box.write("m.onnx", cut), "--inputs", GOOD_NPZ])
    assert_refused(code, err, "truncated")


@pytest.mark.parametrize("where", ["name", "tensor", "op"])
def test_model_with_a_non_utf8_name_is_refused(capsys, box, where):
    """Was: scan --json failed writing the name (bytes) to JSON: internal error, exit 1 (found by fuzzing: one
    byte of log_underflow.onnx changed, offset 52, xor 128)."""
    path = box.write("m.onnx", non_utf8(where).SerializeToString())
    for command in ("scan", "search"):
        code, err = run(capsys, box, command, [path, "--inputs", inputs_for(box, "small")])
        assert_refused(code, err, "not valid UTF-8", "corrupt")


def test_model_without_outputs_is_refused_by_scan_too(capsys, box):
    """Was: scan ranked the tensors of a model with no outputs (exit 0)."""
    path = box.write("m.onnx", BROKEN_MODELS["no outputs"]().SerializeToString())
    code, err = run(capsys, box, "scan", [path, "--inputs", inputs_for(box, "small")])
    assert_refused(code, err, "declares no outputs")


@pytest.mark.parametrize("change, words", [
    ({"model": "log_underflow.onnx"}, ("'model' must be an object",)),  # was: AttributeError, exit 1
    ({"model": None}, ("'model' must be an object",)),
    ({"metrics": []}, ("'metrics' must be",)),
    ({"tolerance": {"atol": 0.01, "rtol": float("nan")}}, ("invalid 'tolerance'", "rtol nan")),  # was: exit 1
    ({"tolerance": {"atol": -1, "rtol": 0.01}}, ("invalid 'tolerance'", "atol -1")),
    ({"tolerance": "tight"}, ("invalid 'tolerance'",)),
])
def test_override_file_with_wrong_types_is_refused(capsys, box, override_file, change, words):
    path = box.write("o.json", json.dumps({**override_file, **change}).encode())
    for command, argv in (("apply", [path, MODEL, "--verify", "--inputs", GOOD_NPZ]),
                          ("check", [MODEL, "--inputs", GOOD_NPZ, "--overrides", path])):
        code, err = run(capsys, box, command, argv)
        assert_refused(code, err, *words)


def test_deeply_nested_override_file_is_refused(capsys, box):
    """Was: RecursionError, exit 1."""
    path = box.write("o.json", b"[" * 100_000 + b"]" * 100_000)
    code, err = run(capsys, box, "compare", [MODEL, "--inputs", GOOD_NPZ, "--overrides", path])
    assert_refused(code, err, "nested too deeply")


def test_non_utf8_override_file_names_the_byte(capsys, box, override_file):
    raw = json.dumps(override_file).encode().replace(b'"softmax"', b'"soft\xe9"')
    code, err = run(capsys, box, "check", [MODEL, "--inputs", GOOD_NPZ, "--overrides", box.write("o.json", raw)])
    assert_refused(code, err, "not UTF-8", "0xe9")


@pytest.mark.parametrize("name", ["../../etc/passwd", "a\x00b", "n" * 10_000, "nowhere"])
def test_file_for_this_model_naming_a_node_it_lacks_is_refused(capsys, box, override_file, name):
    """Was: check ran without the node (exit 1) and compare said nothing (exit 0), although the file claimed to
    be made for this very model. A file made for another version of the model still checks what remains."""
    nodes = [*override_file["fp32_nodes"], {"name": name, "op_type": "Mul", "outputs": []}]
    path = box.write("o.json", json.dumps({**override_file, "fp32_nodes": nodes}).encode())
    for command in ("check", "compare"):
        code, err = run(capsys, box, command, [MODEL, "--inputs", GOOD_NPZ, "--overrides", path])
        assert_refused(code, err, "made for this model", "damaged or was edited")
        assert len(err) < 400
    other = {**override_file, "fp32_nodes": nodes, "model": {**override_file["model"], "sha256": "0" * 64}}
    path = box.write("other.json", json.dumps(other).encode())
    code, err = run(capsys, box, "check", [MODEL, "--inputs", GOOD_NPZ, "--overrides", path])
    assert code == 0, err


def test_without_quiet_the_error_is_still_one_error_line(capsys, box):
    """Progress lines may precede it on stderr; the error itself is one line and there is no traceback."""
    code = main(["compare", str(MODEL), "--inputs", str(box.write("x.npz", b"junk"))])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert len([line for line in err.splitlines() if line.startswith("fp16bisect: error:")]) == 1
