"""A tiny byte-level tokenizer with the GLM-4.1V special tokens and chat template.

No model hub is reachable, so tests and demos build their own tokenizer. It is byte-level
(any text round-trips) and carries every token the recipe relies on as a single id. It can
also carry BPE merges learnt from a corpus (:func:`learn_merges`), which make the texts of a
task family several times shorter: fewer steps to generate an answer, fewer tokens to train on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

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


def _pre_tokenizer(with_merges: bool):
    if not with_merges:  # one piece per text: nothing to merge
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    # words, spaces and punctuation runs are merged apart; every digit stays a token of its own,
    # so sums and coordinates are read and written digit by digit as in the byte-level tokenizer
    return pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])  # fmt: skip


def learn_merges(
    texts: Iterable[str], max_merges: int, min_frequency: int = 2
) -> list[tuple[str, str]]:
    """Up to ``max_merges`` BPE merges learnt from ``texts`` (most frequent pairs first), for
    :func:`build_tokenizer`. The texts are cut at the special tokens, as the tokenizer cuts
    them before its merges apply, so no merge spans one and the text after a marker is learnt
    as it will be read (``<think>green`` as ``green``); fewer merges come back when no pair
    occurs ``min_frequency`` times more."""
    if max_merges < 1:
        return []
    marker = re.compile("|".join(re.escape(t) for t in CONTROL_TOKENS + FORMAT_TOKENS))

    def pieces() -> Iterable[str]:
        for text in texts:
            yield from (part for part in marker.split(text) if part)

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = _pre_tokenizer(with_merges=True)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=len(alphabet) + max_merges,
        min_frequency=min_frequency,
        initial_alphabet=alphabet,
        show_progress=False,
    )
    core.train_from_iterator(pieces(), trainer)
    merges = json.loads(core.to_str())["model"]["merges"]
    return [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in merges][:max_merges]


def build_tokenizer(merges: Sequence[tuple[str, str]] = ()):
    """Return a ``PreTrainedTokenizerFast``: 256 byte tokens, the special tokens, then one token
    per BPE merge (none by default). The byte and special ids are the same in every case."""
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    merges = [(str(a), str(b)) for a, b in merges]
    if merges:
        # the special tokens' ids come before the merges', as in the byte-level tokenizer
        for t in CONTROL_TOKENS + FORMAT_TOKENS:
            vocab[t] = len(vocab)
        for a, b in merges:
            if a not in vocab or b not in vocab:
                raise ValueError(f"BPE merge {a!r} + {b!r}: a part is neither a byte nor an "
                                 "earlier merge's token")  # fmt: skip
            vocab.setdefault(a + b, len(vocab))
    core = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    core.pre_tokenizer = _pre_tokenizer(with_merges=bool(merges))
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
