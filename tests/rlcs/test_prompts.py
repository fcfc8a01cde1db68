"""Prompt rendering and the think/answer budget decisions (pure, no engine)."""

from __future__ import annotations

import random

import pytest

from rlcs.data import Item
from rlcs.prompts import (
    Budget,
    BudgetRule,
    Continuation,
    balance,
    build_messages,
    force_answer_ids,
    plan_continuation,
    render_prompt,
    think_close_id,
)
from rlcs.tokenizer import build_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def test_text_prompt_renders_glm_turns(tok):
    text = render_prompt(Item(id="1", domain="math", prompt="2+2?"), tok)
    assert text == "[gMASK]<sop><|user|>\n2+2?<|assistant|>\n"


def test_image_prompt_has_one_placeholder_per_image(tok):
    item = Item(id="1", domain="vqa", prompt="Compare.", images=["a.png", "b.png"])
    text = render_prompt(item, tok)
    assert text.count("<|begin_of_image|><|image|><|end_of_image|>") == 2
    assert text.endswith("Compare.<|assistant|>\n")


def test_nothink_appends_flag_and_empty_think(tok):
    text = render_prompt({"id": "1", "prompt": "Hi"}, tok, nothink=True)
    assert text.endswith("Hi/nothink<|assistant|>\n<think></think>")


def test_placeholder_in_item_text_is_refused(tok):
    with pytest.raises(ValueError, match="already contains <\\|image\\|>"):
        build_messages({"id": "1", "prompt": "look <|image|>", "images": ["a.png"]})


def test_format_markers_are_single_tokens(tok):
    assert len(force_answer_ids(tok)) == 2
    assert tok.decode(force_answer_ids(tok)) == "</think><answer>"
    assert tok.decode([think_close_id(tok)]) == "</think>"


B = Budget(max_think_tokens=10, max_answer_tokens=5)
CLOSE, FORCE = 99, (99, 98)


def test_finished_rollout_needs_no_second_pass():
    assert plan_continuation([1, 2, 3], "stop", B, CLOSE, FORCE) is None


def test_unclosed_think_is_forced_with_full_answer_budget():
    got = plan_continuation([1] * 10, "length", B, CLOSE, FORCE)
    assert got == Continuation(FORCE, 5, forced=True)


def test_unclosed_think_stays_truncated_without_force_answer():
    b = Budget(10, 5, force_answer=False)
    assert plan_continuation([1] * 10, "length", b, CLOSE, FORCE) is None


def test_closed_think_continues_for_the_rest_of_the_answer_budget():
    # </think> at index 6: three answer tokens already spent, two left.
    got = plan_continuation([1, 1, 1, 1, 1, 1, CLOSE, 2, 2, 2], "length", B, CLOSE, FORCE)
    assert got == Continuation((), 2, forced=False)
    spent = [1, 1, 1, 1, CLOSE, 2, 2, 2, 2, 2]
    assert plan_continuation(spent, "length", B, CLOSE, FORCE) is None


def test_nothink_has_only_the_answer_budget():
    b = Budget(10, 5, nothink=True)
    assert b.first_pass_tokens == 5
    assert plan_continuation([1] * 5, "length", b, CLOSE, FORCE) is None


def test_balance_spreads_long_prompts():
    groups = balance([100, 90, 10, 10, 5, 5], 2)
    loads = [sum([100, 90, 10, 10, 5, 5][i] for i in g) for g in groups]
    assert sorted(i for g in groups for i in g) == list(range(6))
    assert abs(loads[0] - loads[1]) <= 10


STOP = 97


def _two_pass(stream, budget):
    """The worker's two passes over a model whose next token depends only on the length so far."""

    def gen(seq, k):
        out = []
        while len(out) < k and (not out or out[-1] != STOP):
            out.append(stream[len(seq) + len(out)])
        return out

    first = gen([], budget.first_pass_tokens)
    reason = "stop" if first and first[-1] == STOP else "length"
    cont = plan_continuation(first, reason, budget, CLOSE, FORCE)
    if cont is None:
        return first, reason
    seq = first + list(cont.append_ids)
    more = gen(seq, cont.max_tokens)
    return seq + more, "stop" if more and more[-1] == STOP else "length"


def _one_pass(stream, rule):
    seq = []
    while True:
        action, tok = rule.next_action(seq)
        if action == "stop":
            return seq, "length"
        seq.append(tok if action == "force" else stream[len(seq)])
        if seq[-1] == STOP:
            return seq, "stop"


@pytest.mark.parametrize(
    "budget", [B, Budget(10, 5, force_answer=False), Budget(10, 5, nothink=True), Budget(3, 1)]
)
def test_budget_rule_allows_exactly_the_two_pass_rollouts(budget):
    rule = BudgetRule(budget, CLOSE, FORCE)
    rng = random.Random(0)
    seen = set()
    for _ in range(2000):
        # a close and a stop each at a random place (or nowhere) in a stream of ordinary tokens
        stream = [rng.randint(1, 9) for _ in range(40)]
        for tok in (CLOSE, STOP):
            if rng.random() < 0.7:
                stream[rng.randrange(len(stream))] = tok
        got = _one_pass(stream, rule)
        assert got == _two_pass(stream, budget), stream
        assert len(got[0]) <= rule.max_tokens
        seen.add((got[1], CLOSE in got[0]))
    assert len(seen) >= (2 if budget.nothink else 3), seen  # stops, truncations, closes all met


def test_budget_rule_refuses_force_ids_that_do_not_close_the_think():
    with pytest.raises(ValueError, match="force ids"):
        BudgetRule(B, CLOSE, (98, 99))
