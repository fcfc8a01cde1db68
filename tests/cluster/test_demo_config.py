"""The demo's config against the data it trains on: every document fits a packed row.

``data.seq_len`` of ``configs/tiny-vlm.yaml`` is kept short on purpose (on CPU a packed row
costs the square of its length), so a generator that writes longer captions or prompts must
fail here, not minutes into ``rlcs demo``.
"""

from __future__ import annotations

import json

from actors.learner_batches import pretrain_documents, sft_documents
from actors.learner_model import load_processors
from cluster.demo import DEFAULT_CONFIG
from rlcs.config import load_config
from rlcs.data import decode_image
from rlcs.prompts import render_prompt
from rlcs.tasks import build_task_data


def _rows(path):
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        row["images"] = [decode_image(ref, path.parent) for ref in row["images"]]
    return rows


def test_demo_documents_fit_the_packed_rows(tiny_vlm, tmp_path):
    cfg = load_config(DEFAULT_CONFIG)
    syn = cfg.data.synthetic
    seq_len = cfg.data.seq_len
    # the hard end of the demo's range writes the longest captions (most shapes, most elements)
    hardest = (syn.difficulty[1], syn.difficulty[1])
    sizes = {"rl_train": 6, "heldout": 0, "sft": 6, "pretrain": 6}
    files = build_task_data(tmp_path, sizes, tuple(syn.domains), difficulty=hardest, progress=False)
    tokenizer, processor = load_processors(tiny_vlm)

    pre = pretrain_documents(_rows(files["pretrain"]), tokenizer, processor, seq_len)
    sft = sft_documents(_rows(files["sft"]), tokenizer, processor, seq_len)
    assert len(pre) == len(sft) == 6 * len(syn.domains)

    budget = cfg.rollout.max_think_tokens + cfg.rollout.max_answer_tokens + 2  # + forced tags
    longest_rl = 0
    for row in _rows(files["rl_train"]):
        text = render_prompt(row, tokenizer)
        prompt = processor(text, row["images"])["input_ids"][0]
        longest_rl = max(longest_rl, len(prompt) + budget)
    longest = max(longest_rl, *(len(d) for d in pre + sft))
    assert longest <= seq_len, f"a demo document of {longest} tokens exceeds seq_len={seq_len}"
    # and the rows are not far longer than the documents: that is what makes them cheap
    assert seq_len <= 4 * longest
