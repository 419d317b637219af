"""The peer strategies of scripts/bench_peers.py on a synthetic oracle (milliseconds)."""

from __future__ import annotations

import importlib.util
import math
import sys

from conftest import ROOT

spec = importlib.util.spec_from_file_location("bench_peers", ROOT / "scripts" / "bench_peers.py")
bench_peers = importlib.util.module_from_spec(spec)
sys.modules.setdefault("bench_peers", bench_peers)  # dataclasses look their module up there
spec.loader.exec_module(bench_peers)


def test_polygraphy_bisect_returns_a_passing_prefix_in_about_log2_n_plus_one():
    ids = list(range(100))
    culprits = frozenset({17, 60})
    result = bench_peers.polygraphy_bisect(ids, lambda plan: culprits <= plan)
    assert result.fp32 == frozenset(range(61))  # the shortest passing prefix
    assert abs(result.evaluations - (math.log2(100) + 1)) <= 1
    reverse = bench_peers.polygraphy_bisect(ids, lambda plan: culprits <= plan, "reverse")
    assert reverse.fp32 == frozenset(range(17, 100))


def test_polygraphy_bisect_reports_nothing_when_all_fp32_fails():
    result = bench_peers.polygraphy_bisect(list(range(10)), lambda plan: False)
    assert result.fp32 is None and result.evaluations == 1


def test_onnxconverter_greedy_result_passes():
    ids = list(range(100))
    culprits = frozenset({3, 4, 71})
    result = bench_peers.onnxconverter_greedy(ids, lambda plan: culprits <= plan)
    assert culprits <= result.fp32
    assert result.fp32 == culprits  # on a planted-set oracle every non-culprit segment is accepted
    assert not result.note
