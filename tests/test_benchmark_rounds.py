"""The benchmarks' alternating rounds: every variant once a round, warm-up rounds not kept."""

import importlib.util
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def rounds():
    name = "rlcs_benchmark_rounds"
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "rounds.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # a dataclass looks its module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules[name]


def test_variants_alternate_within_each_round_and_warm_up_is_dropped(rounds):
    calls = []

    def variant(name):
        def call(r):
            calls.append((r, name))
            return f"{name}{r}"

        return call

    t = rounds.alternate({"a": variant("a"), "b": variant("b")}, rounds=2, warmup=1)
    assert calls == [(0, "a"), (0, "b"), (1, "a"), (1, "b"), (2, "a"), (2, "b")]
    assert t.results == {"a": ["a1", "a2"], "b": ["b1", "b2"]}
    assert [len(t.wall[k]) for k in "ab"] == [2, 2]
    assert [len(t.cpu[k]) for k in "ab"] == [2, 2]


def test_wall_and_cpu_time_are_told_apart(rounds):
    def sleep(r):
        time.sleep(0.05)

    def spin(r):
        end = time.process_time() + 0.05
        while time.process_time() < end:
            pass

    t = rounds.alternate({"sleep": sleep, "spin": spin}, rounds=3, warmup=0)
    assert t.median("sleep") >= 0.05
    assert t.median_cpu("sleep") < 0.03  # sleeping costs no CPU time
    assert t.median_cpu("spin") >= 0.05
    assert t.line("sleep").startswith("sleep 0.0")
    assert len(t.line("sleep").split()) == 4


def test_progress_sees_every_call_including_warm_up(rounds):
    seen = []
    rounds.alternate(
        {"x": lambda r: r * 10},
        rounds=2,
        warmup=1,
        on_call=lambda r, key, seconds, result: seen.append((r, key, result, seconds >= 0)),
    )
    assert seen == [(0, "x", 0, True), (1, "x", 10, True), (2, "x", 20, True)]


@pytest.mark.parametrize(("n", "warmup", "message"), [(0, 1, "rounds=0"), (2, -1, "warmup=-1")])
def test_bad_round_counts_are_refused(rounds, n, warmup, message):
    with pytest.raises(ValueError, match=message):
        rounds.alternate({"x": lambda r: None}, rounds=n, warmup=warmup)


def test_a_round_count_below_its_least_is_a_usage_error(rounds):
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=rounds.count(1))
    assert ap.parse_args(["--steps", "3"]).steps == 3
    for bad, message in (("0", "must be at least 1, got 0"), ("two", "not an integer: 'two'")):
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            rounds.count(1)(bad)
    with pytest.raises(SystemExit):
        ap.parse_args(["--steps", "0"])
