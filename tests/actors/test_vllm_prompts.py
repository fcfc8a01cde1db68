"""How the vLLM engine hands an image prompt's text to vLLM's multimodal processor (no engine
is started: the processor's tokenizer is all that decides it)."""

from __future__ import annotations

from tokenizers.processors import TemplateProcessing

from actors.rollout.vllm_engine import added_prefix, processor_text
from rlcs.data import Item
from rlcs.prompts import render_prompt
from rlcs.tokenizer import build_tokenizer

ITEM = Item(id="i", domain="vqa", prompt="What shape?", images=["a.png"])


def _adding_prefix():
    """The project's tokenizer made to add ``[gMASK]<sop>`` itself, as GLM's published
    tokenizers do when asked for their special tokens."""
    tok = build_tokenizer()
    g, s = tok.convert_tokens_to_ids(["[gMASK]", "<sop>"])
    tok.backend_tokenizer.post_processor = TemplateProcessing(
        single="[gMASK] <sop> $A", special_tokens=[("[gMASK]", g), ("<sop>", s)]
    )
    return tok


def test_a_tokenizer_that_adds_the_templates_prefix_gets_it_once():
    tok = _adding_prefix()
    text = render_prompt(ITEM, tok)
    assert text.startswith("[gMASK]<sop>")
    doubled = tok.encode(text, add_special_tokens=True)
    assert doubled[:4] == doubled[2:4] * 2  # what the processor would have been given
    assert added_prefix(tok) == "[gMASK]<sop>"
    sent = processor_text(text, added_prefix(tok))
    assert tok.encode(sent, add_special_tokens=True) == tok.encode(text, add_special_tokens=False)


def test_a_tokenizer_that_adds_nothing_gets_the_text_as_rendered():
    tok = build_tokenizer()
    text = render_prompt(ITEM, tok)
    assert tok.encode("", add_special_tokens=True) == []
    assert added_prefix(tok) == ""
    assert processor_text(text, added_prefix(tok)) == text


def test_a_continuation_sends_the_image_placeholders_as_vllm_expands_them_once():
    """vLLM's processor expands every image placeholder of a token prompt with images, already
    expanded or not: a continuation (the answer after a thinking budget) gives back the first
    pass's expanded ids collapsed, or its images would be expanded twice. vLLM's own update
    function stands in for GLM-4.1V's (one ``<|image|>`` to N of them)."""
    from vllm.multimodal.processing.processor import (
        PromptReplacement,
        _apply_token_matches_with_placeholders,
    )

    from actors.rollout.engine import GenRequest
    from actors.rollout.vllm_engine import VLLMEngine, collapse_image_runs, image_token_id

    tok = build_tokenizer()
    img = image_token_id(tok)
    assert img == tok.convert_tokens_to_ids("<|image|>")
    begin, end = tok.convert_tokens_to_ids(["<|begin_of_image|>", "<|end_of_image|>"])
    update = PromptReplacement(modality="image", target=[img], replacement=[img] * 4)
    updates = {"image": [[update.resolve(0)], [update.resolve(1)]]}

    def expand(ids: list[int]) -> list[int]:
        return _apply_token_matches_with_placeholders(ids, updates)[0]

    text_ids = [5, begin, img, end, 6, begin, img, end, 7]
    first = expand(text_ids)  # what the first pass's prompt became
    assert first.count(img) == 8
    assert collapse_image_runs(first, img) == text_ids
    assert collapse_image_runs(first, None) == first

    engine = object.__new__(VLLMEngine)  # no engine started: only how it builds the prompt
    engine.image_token_id, engine.tokenizer_prefix, engine.banned = img, "", {img: -100.0}
    engine.stop_ids = [2]
    extra = [40, 41]
    cont = GenRequest(first, 8, 0, "text", images=["a", "b"], extra_ids=extra)
    sent = engine.prompt(cont)
    assert sent["multi_modal_data"] == {"image": ["a", "b"]}
    assert expand(sent["prompt_token_ids"]) == first + extra  # expanded once, as in pass one
    assert engine.sampling_params(cont).logit_bias == {img: -100.0}
