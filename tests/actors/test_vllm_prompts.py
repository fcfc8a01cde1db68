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
