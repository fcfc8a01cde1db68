"""Hard timeouts, crashes, injection and pathological inputs, through the real worker pool."""

from __future__ import annotations

import time

import pytest
from conftest import INJECTION, glm

from rewards import RewardScorer, register

ALL_DOMAINS = ["math", "chart", "ocr", "grounding", "gui", "vqa"]


@pytest.fixture(scope="module")
def bad_scorer():
    register("hang", "adversarial_verifiers:Hang")
    register("crash", "adversarial_verifiers:Crash")
    register("out_of_range", "adversarial_verifiers:OutOfRange")
    s = RewardScorer(2, timeout_s=1.0, defaults={"format": "bare"}, memory_limit_mb=600)
    yield s
    s.close()


def test_a_hanging_item_times_out_and_the_rest_of_the_batch_is_scored(bad_scorer):
    items = [("hang", "ok", None)] * 20 + [("hang", "hang", None)] + [("hang", "ok", None)] * 20
    start = time.monotonic()
    results = bad_scorer.score_batch(items, timeout_s=1.0)
    assert time.monotonic() - start < 1.0 + 1.0
    assert results[20].error == "timeout" and results[20].reward == 0.0
    assert [r.reward for i, r in enumerate(results) if i != 20] == [1.0] * 40
    assert bad_scorer.counters()["hang"]["timeouts"] >= 1
    assert bad_scorer.pool.stats["killed"] >= 1


def test_two_hanging_items_at_once_cost_one_timeout_not_two(bad_scorer):
    # a 3 s limit: two timeouts one after the other take 6 s at least; both at once, with the
    # workers' restart well under 5 even on a loaded machine (a 1 s limit left too little room)
    start = time.monotonic()
    items = [("hang", "hang", None)] * 2 + [("hang", "ok", None)] * 5
    results = bad_scorer.score_batch(items, timeout_s=3.0)
    assert time.monotonic() - start < 3.0 + 2.0
    assert [r.error for r in results[:2]] == ["timeout", "timeout"]
    assert all(r.reward == 1.0 for r in results[2:])


@pytest.mark.parametrize("kind", ["die", "recurse", "oom"])
def test_a_crashing_item_is_an_error_never_a_hang(bad_scorer, kind):
    items = [("crash", "ok", None)] * 5 + [("crash", kind, None)] + [("crash", "ok", None)] * 5
    start = time.monotonic()
    results = bad_scorer.score_batch(items, timeout_s=5.0)
    assert time.monotonic() - start < 5.0 + 1.0
    assert results[5].error == "crash" and results[5].reward == 0.0
    assert all(r.reward == 1.0 and r.error is None for i, r in enumerate(results) if i != 5)


def test_a_reward_outside_the_unit_interval_is_reported(bad_scorer):
    res = bad_scorer.score("out_of_range", "1.5", None)
    assert (res.reward, res.error) == (0.0, "verifier")
    assert bad_scorer.score("out_of_range", "nan", None).error == "verifier"


def test_an_items_own_timeout_applies_within_a_batch(bad_scorer):
    items = [("hang", "ok", None)] * 4 + [("hang", "hang", None, {"timeout_s": 0.3})]
    start = time.monotonic()
    results = bad_scorer.score_batch(items, timeout_s=5.0)  # the batch's limit, for the others
    assert time.monotonic() - start < 0.3 + 1.0
    assert (results[4].error, results[4].detail) == (
        "timeout",
        "no result within 0.3 s; worker killed",
    )
    assert [r.reward for r in results[:4]] == [1.0] * 4
    # through score() too, where timeout_s is the call's own
    start = time.monotonic()
    assert bad_scorer.score("hang", "hang", None, timeout_s=0.3).error == "timeout"
    assert time.monotonic() - start < 0.3 + 1.0


def test_a_scorers_ceiling_caps_what_an_item_or_a_batch_asks(bad_scorer):  # registers "hang"
    """A server's --timeout (max_timeout_s) is the most any caller's timeout_s buys: asking for
    more cannot hold its workers longer."""
    s = RewardScorer(1, timeout_s=0.5, max_timeout_s=0.5, defaults={"format": "bare"})
    try:
        start = time.monotonic()
        own = s.score_batch([("hang", "hang", None, {"timeout_s": 30})])
        batch = s.score_batch([("hang", "hang", None)], timeout_s=30)
        assert time.monotonic() - start < 2 * (0.5 + 1.0)
        assert [(r.error, r.detail) for r in own + batch] == [
            ("timeout", "no result within 0.5 s; worker killed")
        ] * 2
        assert s.score("hang", "hang", None, timeout_s=0.2).detail == (
            "no result within 0.2 s; worker killed"  # less is fine
        )
    finally:
        s.close()
    with pytest.raises(ValueError, match="max_timeout_s"):
        RewardScorer(1, max_timeout_s=0)


def test_pool_keeps_working_after_kills(bad_scorer):
    bad_scorer.score_batch([("hang", "hang", None)], timeout_s=0.3)
    assert [r.reward for r in bad_scorer.score_batch([("hang", "ok", None)] * 10)] == [1.0] * 10


GROUND_TRUTH = {
    "math": "5",
    "chart": "12",
    "ocr": "hello",
    "grounding": [[0, 0, 100, 100]],
    "gui": {"action": "type", "text": "hello"},
    "vqa": "yes",
}


@pytest.mark.parametrize("domain", ALL_DOMAINS)
def test_injection_strings_never_execute(scorer, tmp_path, domain):
    canary = tmp_path / "CANARY"
    payloads = [
        INJECTION.format(canary=canary),
        "\\text{" + INJECTION.format(canary=canary) + "}",
        '{"action": "type", "text": "' + INJECTION.format(canary=canary).replace("'", "") + '"}',
        "lambda: " + INJECTION.format(canary=canary),
    ]
    results = scorer.score_batch([(domain, glm(p), GROUND_TRUTH[domain]) for p in payloads])
    assert all(r.reward < 1.0 for r in results if domain != "ocr")
    assert not canary.exists()


PATHOLOGICAL = [
    "9^{9^{9^{9}}}",
    "9**9**9**9",
    "1" * 100_000,
    "(" * 5000 + "1" + ")" * 5000,
    "x" * 1_000_000,
    "\\frac{" * 3000 + "1" + "}{2}" * 3000,
    "(2^{2^{100}})!",
    "((2^{1000})^{1000})^{1000}",
    "10^{10^{10}} - 10^{10^{10}} + 5",
]


@pytest.mark.parametrize("domain", ALL_DOMAINS)
def test_pathological_inputs_return_within_timeout_plus_one_second(scorer, domain):
    items = [(domain, glm(p), GROUND_TRUTH[domain]) for p in PATHOLOGICAL]
    start = time.monotonic()
    results = scorer.score_batch(items, timeout_s=2.0)
    assert time.monotonic() - start < 2.0 + 1.0
    assert all(r.reward < 0.01 for r in results)
    assert [
        r.error for r in results if r.error not in (None, "parse")
    ] == []  # refused, not timed out


def test_megabyte_responses_in_every_domain_return_in_time(scorer):
    huge = "z" * 1_000_000
    items = [(d, glm(huge), GROUND_TRUTH[d]) for d in ALL_DOMAINS]
    items += [
        (d, "<think>" + huge + "</think><answer>" + huge, GROUND_TRUTH[d]) for d in ALL_DOMAINS
    ]
    start = time.monotonic()
    results = scorer.score_batch(items, timeout_s=2.0)
    assert time.monotonic() - start < 2.0 + 1.0
    assert all(r.reward == 0.0 for r in results)
    assert all(r.error == "parse" and r.extracted is None for r in results[: len(ALL_DOMAINS)])
    assert all(r.error == "format" for r in results[len(ALL_DOMAINS) :])


def test_unknown_domain_is_an_error_naming_the_known_ones(scorer):
    res = scorer.score("poetry", glm("x"), "x")
    assert res.error == "domain" and "math" in res.detail


def test_register_a_domain_by_import_path(scorer):
    register("always_one", "adversarial_verifiers:OutOfRange")
    assert scorer.score("always_one", glm("1"), None).reward == 1.0
    with pytest.raises(ValueError, match="package.module:Class"):
        register("x", "not_a_path")
    with pytest.raises(ModuleNotFoundError):
        register("x", "no_such_module:Verifier")


def test_large_responses_keep_their_verdicts_wherever_they_are_gated(scorer):
    # long but not a loop: a repetition loop would be scored 0 as degenerate thinking
    think = "<think>" + " ".join(f"step {k} of the reasoning" for k in range(30_000)) + "</think>"
    good = think + "<answer><|begin_of_box|>\\frac{1}{2}<|end_of_box|></answer>"
    no_box = think + "<answer>1/2</answer>"
    results = scorer.score_batch([("math", good, "0.5"), ("math", no_box, "0.5")])
    assert (results[0].reward, results[0].extracted, results[0].format_ok) == (
        1.0,
        "\\frac{1}{2}",
        True,
    )
    assert (results[1].error, results[1].format_ok) == ("format", False)
    assert "box" in results[1].detail


def test_concurrent_callers_with_hanging_items_all_finish(bad_scorer):
    import concurrent.futures as cf

    def call(k: int) -> list:
        items = [("hang", "hang" if k % 3 == 0 and i == 0 else "ok", None) for i in range(30)]
        return bad_scorer.score_batch(items, timeout_s=1.0)

    start = time.monotonic()
    with cf.ThreadPoolExecutor(8) as ex:
        batches = list(ex.map(call, range(8)))
    assert time.monotonic() - start < 2 * (1.0 + 1.0)
    for k, results in enumerate(batches):
        hung = k % 3 == 0
        assert [r.error for r in results[:1]] == (["timeout"] if hung else [None])
        assert all(r.reward == 1.0 for r in results[1:])


def test_malformed_items_are_request_errors_not_exceptions(scorer):
    before = scorer.counters().get("?", {})
    results = scorer.score_batch(
        [
            {"domain": "math"},
            ("math", glm("1"), "1", ["not", "a", "dict"]),
            (["math"], glm("1"), "1"),
            42,
        ]
    )
    assert [r.error for r in results] == ["request"] * 4
    assert "expected domain, response, answer" in results[0].detail
    # read as no domain (their results say ""), they count under "?" (docs/rewards.md)
    assert [r.domain for r in results] == [""] * 4
    after = scorer.counters()["?"]
    assert after["items"] == before.get("items", 0) + 4
    assert after["errors"] == before.get("errors", 0) + 4


def test_a_large_response_full_of_angle_brackets_is_gated_in_a_worker(scorer):
    soup = (
        "<think>"
        + " ".join(f"a{k} < b" for k in range(20_000))
        + "</think><answer><|begin_of_box|>5<|end_of_box|></answer>"
    )
    start = time.monotonic()
    res = scorer.score("math", soup, "5")
    assert (res.reward, res.extracted) == (1.0, "5")
    assert time.monotonic() - start < 2.0


def test_ground_truths_that_cannot_be_used_are_answer_errors(scorer):
    deep: object = [[1, 1, 5, 5]]
    for _ in range(20):
        deep = [deep]
    results = scorer.score_batch(
        [
            ("math", glm("1"), None),
            ("grounding", glm("[[1, 1, 5, 5]]"), deep),
            ("math", glm("1"), "1" * 70_000),
            ("math", glm("1"), "1"),
        ]
    )
    assert [r.error for r in results] == ["answer", "answer", "answer", None]
    assert "no ground truth" in results[0].detail
    assert "nested deeper" in results[1].detail and "longer than" in results[2].detail


def test_a_task_that_cannot_be_pickled_fails_alone_and_the_pool_goes_on(scorer):
    """A ground truth nested past pickle's recursion limit used to stop the dispatcher for good:
    every later item got a pool error. Only that task fails now."""
    deep: object = 1
    for _ in range(3000):
        deep = [deep]
    math = "rewards.verifiers.math:MathVerifier"
    outcomes = scorer.pool.run([(math, "1", deep, {}), (math, "2", "2", {})], 5.0)
    assert outcomes[0][:2] == (0.0, "request") and "RecursionError" in outcomes[0][2]
    assert outcomes[1] == (1.0, None, None)
    assert scorer.pool.healthy
    assert scorer.score("math", glm("7"), "7").reward == 1.0


def test_made_up_domains_are_counted_as_unknown(scorer):
    names = [f"no-such-domain-{i}" for i in range(5)]
    before = scorer.counters().get("unknown", {}).get("items", 0)
    results = scorer.score_batch([(d, glm("1"), "1") for d in names])
    assert {r.error for r in results} == {"domain"}
    counters = scorer.counters()
    assert counters["unknown"]["items"] == before + 5
    assert not set(names) & set(counters)


def test_a_script_that_scores_unguarded_fails_at_once_instead_of_hanging(tmp_path):
    """The verifier workers run the main script again as they start (multiprocessing's
    forkserver): scoring at a script's top level used to restart dying workers forever."""
    import subprocess
    import sys
    from pathlib import Path

    call = 'print(rewards.score("math", "<think>.</think><answer><|begin_of_box|>1<|end_of_box|></answer>", "1").reward)'  # noqa: E501
    root = str(Path(__file__).resolve().parents[2])
    scripts = {"bare.py": f"import rewards\n{call}\n",
               "guarded.py": f"import rewards\nif __name__ == '__main__':\n    {call}\n"}  # fmt: skip
    got = {}
    for name, text in scripts.items():
        (tmp_path / name).write_text(text)
        start = time.monotonic()
        got[name] = subprocess.run([sys.executable, name], cwd=tmp_path, capture_output=True,
                                   text=True, timeout=120, env={"PYTHONPATH": root})  # fmt: skip
        assert time.monotonic() - start < 60
    assert got["bare.py"].returncode == 1
    assert "a reward verifier worker exited as it started" in got["bare.py"].stderr
    assert 'if __name__ == "__main__":' in got["bare.py"].stderr
    assert got["guarded.py"].returncode == 0 and got["guarded.py"].stdout == "1.0\n"
