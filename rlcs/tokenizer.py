"""A tiny byte-level tokenizer with the GLM-4.1V special tokens and chat template.

No model hub is reachable, so tests and demos build their own tokenizer. It is byte-level
(any text round-trips) and carries every token the recipe relies on as a single id.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

#: Markers of the response format. They stay visible when decoding, so verifiers can read them.
FORMAT_TOKENS = [
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",
    "<|begin_of_box|>",
    "<|end_of_box|>",
    "/nothink",
]
#: Control tokens: roles, document and multimodal markers. Dropped by ``skip_special_tokens``.
CONTROL_TOKENS = [
    "<|endoftext|>",
    "[gMASK]",
    "<sop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
    "<|begin_of_image|>",
    "<|end_of_image|>",
    "<|image|>",
    "<|begin_of_video|>",
    "<|end_of_video|>",
    "<|video|>",
    "<|pad|>",
]

#: GLM-4.1V-style chat template. An image part becomes one ``<|image|>`` placeholder that the
#: processor expands to the image's token count (exactly once). ``enable_thinking=False``
#: appends ``/nothink`` to the last user turn and pre-fills an empty think block.
CHAT_TEMPLATE = (
    "[gMASK]<sop>"
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for m in messages -%}{%- if m['role'] == 'user' -%}{%- set ns.last_user = loop.index0 -%}"
    "{%- endif -%}{%- endfor -%}"
    "{%- for m in messages -%}"
    "<|{{ m['role'] }}|>{{ '\\n' }}"
    "{%- if m['content'] is string -%}{{ m['content'] }}"
    "{%- else -%}{%- for part in m['content'] -%}"
    "{%- if part['type'] == 'image' -%}<|begin_of_image|><|image|><|end_of_image|>"
    "{%- elif part['type'] == 'video' -%}<|begin_of_video|><|video|><|end_of_video|>"
    "{%- else -%}{{ part['text'] }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- if loop.index0 == ns.last_user and enable_thinking is defined "
    "and not enable_thinking -%}/nothink{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|assistant|>{{ '\\n' }}"
    "{%- if enable_thinking is defined and not enable_thinking -%}<think></think>{%- endif -%}"
    "{%- endif -%}"
)


def build_tokenizer():
    """Return a ``PreTrainedTokenizerFast``: 256 byte tokens plus the special tokens."""
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], fuse_unk=False))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in CONTROL_TOKENS])
    core.add_tokens([AddedToken(t, special=False, normalized=False) for t in FORMAT_TOKENS])
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|endoftext|>",
        pad_token="<|pad|>",
        padding_side="left",
        model_max_length=32768,
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def stop_token_ids(tokenizer) -> list[int]:
    """Ids that end an assistant turn: end of text, or the model starting a new turn."""
    return [
        tokenizer.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|user|>", "<|observation|>")
    ]


def save_tokenizer(tokenizer, path: str | Path) -> None:
    tokenizer.save_pretrained(str(path))
