"""Prompt rendering and the think/answer budget decisions (pure, no engine)."""

from __future__ import annotations

import pytest

from rlcs.data import Item
from rlcs.prompts import (
    Budget,
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
