"""One exception base, each error with its exit code; "could not evaluate" is not a failed build."""

import pytest

from fp16bisect import errors
from fp16bisect.cli import main as cli


@pytest.mark.parametrize("error, code", [(errors.CheckFailed, 1), (errors.UsageError, 2),
                                         (errors.ToleranceUnreachable, 3), (errors.Error, 4)])
def test_each_error_carries_its_exit_code_and_the_cli_exits_with_it(monkeypatch, capsys, error, code):
    def command(args):
        raise error("what is wrong, and how to fix it")

    monkeypatch.setitem(cli.COMMANDS, "scan", command)
    assert issubclass(error, errors.Error)
    assert cli.main(["scan", "m.onnx", "--inputs", "x.npz"]) == code
    assert capsys.readouterr().err == "fp16bisect: error: what is wrong, and how to fix it\n"


def test_a_build_failure_is_one_kind_of_could_not_evaluate():
    assert issubclass(errors.BuildFailed, errors.CouldNotEvaluate)
    assert errors.BuildFailed("x").kind == "build"
    assert errors.CouldNotEvaluate("x").kind == "cannot_evaluate"
    assert not issubclass(errors.CouldNotEvaluate, errors.BuildFailed)


def test_a_command_that_says_it_cannot_evaluate_did_not_fail_a_build(tmp_path):
    """Exit 125 is the judge's "cannot evaluate": a CouldNotEvaluate of that kind, not a BuildFailed."""
    from pathlib import Path

    import numpy as np

    from fp16bisect.backends import Options, make_backend
    from fp16bisect.model.graph import Graph

    model = Path(__file__).resolve().parents[1] / "sample_models" / "transformer_block.onnx"
    graph = Graph.load(str(model))
    options = Options.of(command=": {model}; exit 125", plans_dir=str(tmp_path / "plans"))
    inputs = dict(np.load(model.with_suffix(".npz")))
    with make_backend("command", graph, options) as backend, pytest.raises(errors.CouldNotEvaluate) as raised:
        backend.run_plan(frozenset(), [inputs])
    assert raised.value.kind == "cannot_evaluate" and not isinstance(raised.value, errors.BuildFailed)
