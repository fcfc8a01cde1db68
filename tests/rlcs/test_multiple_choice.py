"""Multiple-choice items: their options validated at load, and asked as fill-in-the-blank (the
recipe's) or by letter, as RL, evaluation and grading take them."""

import json

import pytest

from rlcs.data import DatasetError, Item, load_items, write_jsonl


def write_lines(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


MC = {"id": "q1", "domain": "math", "prompt": "What is 1/2 + 1/4?", "answer": "(b)",
      "choices": ["1/4", "\\frac{3}{4}", "1", "2"]}  # fmt: skip


def test_a_multiple_choice_item_is_asked_as_fill_in_the_blank_or_by_letter(tmp_path):
    from rlcs.data import as_asked

    (item,) = load_items(write_lines(tmp_path / "mc.jsonl", [MC]))
    fill = as_asked(item)  # the recipe's default: no options, the right one's text to match
    assert (fill.prompt, fill.answer, fill.choices) == (MC["prompt"], "\\frac{3}{4}", None)
    letter = as_asked(item, "letter")
    assert letter.prompt == "What is 1/2 + 1/4?\n(A) 1/4\n(B) \\frac{3}{4}\n(C) 1\n(D) 2"
    assert (letter.answer, letter.choices) == ("B", None)
    plain = Item(id="p", domain="math", prompt="2+2?", answer="4")
    assert as_asked(plain) is plain and as_asked(plain, "letter") is plain
    # the file keeps its options when written back (rlcs grade's copy), and an item without
    # any is written without the field, as before
    again = load_items(write_jsonl([item, plain], tmp_path / "out.jsonl"))
    assert again == [item, plain]
    assert "choices" not in (tmp_path / "out.jsonl").read_text().splitlines()[1]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"answer": "E"}, "answered by the right option's letter, A to D; got 'E'"),
        ({"answer": "3/4"}, "answered by the right option's letter, A to D; got '3/4'"),
        ({"choices": ["only"]}, "choices: give 2 to 26 options (lettered A-Z), got 1"),
        ({"choices": ["a", " ", "c"]}, "choices: option B is blank"),
    ],
)
def test_a_multiple_choice_item_that_cannot_be_asked_stops_the_load(tmp_path, change, reason):
    p = write_lines(tmp_path / "mc.jsonl", [{**MC, **change}])
    with pytest.raises(DatasetError, match="mc.jsonl:1: ") as e:
        load_items(p)
    assert reason in str(e.value)


def test_a_run_scores_a_fill_in_answer_by_the_domains_verifier(tmp_path):
    """Through the RL loader and the reward scorer: 0.75 matches the option \\frac{3}{4}; the
    letter, a guess, no longer earns the reward."""
    from cluster.stage_data import load_rl_items
    from rewards import score

    path = write_lines(tmp_path / "mc.jsonl", [MC])
    (fill,) = load_rl_items([path])
    box = "<think>.</think><answer><|begin_of_box|>{}<|end_of_box|></answer>"
    assert score("math", box.format("0.75"), fill.answer).reward == 1.0
    assert score("math", box.format("B"), fill.answer).reward == 0.0
    (letter,) = load_rl_items([path], multiple_choice="letter")
    assert score("math", box.format("(B)"), letter.answer).reward == 1.0
