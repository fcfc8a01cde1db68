"""SFT loss masks: only the assistant's reply (and its end-of-turn token) carries loss."""

from __future__ import annotations

import pytest

from rlcs.sft import build_sft_example, check_response
from rlcs.tokenizer import build_tokenizer

RESPONSE = "<think>2 and 2 make 4</think><answer><|begin_of_box|>4<|end_of_box|></answer>"


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def _trained_text(tok, ex) -> str:
    return tok.decode([t for t, m in zip(ex.input_ids, ex.loss_mask, strict=True) if m])


def _prompt_text(tok, ex) -> str:
    return tok.decode([t for t, m in zip(ex.input_ids, ex.loss_mask, strict=True) if not m])


def test_thinking_example_trains_only_the_reply(tok):
    ex = build_sft_example(tok, "What is 2+2?", RESPONSE)
    assert len(ex.input_ids) == len(ex.loss_mask)
    assert _prompt_text(tok, ex) == "[gMASK]<sop><|user|>\nWhat is 2+2?<|assistant|>\n"
    assert _trained_text(tok, ex) == RESPONSE + "<|endoftext|>"
    # the six format markers are single tokens, and all of them are trained
    trained = [t for t, m in zip(ex.input_ids, ex.loss_mask, strict=True) if m]
    for marker in (
        "<think>",
        "</think>",
        "<answer>",
        "</answer>",
        "<|begin_of_box|>",
        "<|end_of_box|>",
    ):
        assert tok.convert_tokens_to_ids(marker) in trained
    # the mask is one contiguous block at the end
    first = ex.loss_mask.index(1)
    assert all(ex.loss_mask[first:]) and not any(ex.loss_mask[:first])


def test_nothink_example_prefills_empty_think_in_the_prompt(tok):
    reply = "<answer><|begin_of_box|>4<|end_of_box|></answer>"
    ex = build_sft_example(tok, "What is 2+2?", "<think></think>" + reply, thinking=False)
    assert (
        _prompt_text(tok, ex)
        == "[gMASK]<sop><|user|>\nWhat is 2+2?/nothink<|assistant|>\n<think></think>"
    )
    assert _trained_text(tok, ex) == reply + "<|endoftext|>"
    nothink = tok.convert_tokens_to_ids("/nothink")
    assert ex.loss_mask[ex.input_ids.index(nothink)] == 0
    same = build_sft_example(tok, "What is 2+2?", reply, thinking=False)
    assert same.input_ids == ex.input_ids and same.loss_mask == ex.loss_mask


def test_bad_formats_are_refused():
    with pytest.raises(ValueError, match="thinking response must be"):
        check_response("<answer>4</answer>", thinking=True)
    with pytest.raises(ValueError, match="non-thinking response must be"):
        check_response("<think>long</think><answer>4</answer>", thinking=False)


def test_image_example_masks_image_tokens_out(tiny_vlm, shapes_image):
    from rlcs.vlm_processor import Glm4vImageTextProcessor

    proc = Glm4vImageTextProcessor.from_pretrained(tiny_vlm)
    ex = build_sft_example(
        proc, "How many shapes?", RESPONSE.replace("4", "2"), images=[shapes_image]
    )
    image_id = proc.image_token_id
    n_image = sum(1 for t in ex.input_ids if t == image_id)
    assert n_image == int(ex.images["image_grid_thw"].prod()) // 4 == 12
    assert ex.images["mm_token_type_ids"].sum().item() == n_image
    assert all(m == 0 for t, m in zip(ex.input_ids, ex.loss_mask, strict=True) if t == image_id)
    assert _trained_text(proc.tokenizer, ex) == RESPONSE.replace("4", "2") + "<|endoftext|>"
