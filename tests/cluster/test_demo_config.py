"""The demo's config against the data it trains on: every document fits a packed row.

``data.seq_len`` of ``configs/tiny-vlm.yaml`` is kept short on purpose (on CPU a packed row
costs the square of its length), so a generator that writes longer captions or prompts must
fail here, not minutes into ``rlcs demo``.
"""

from __future__ import annotations

import json
from pathlib import Path

from actors.learner_batches import pretrain_documents, sft_documents
from actors.learner_model import load_processors
from cluster.demo import DEFAULT_CONFIG
from cluster.stage_data import load_stage_data, supervised_batch
from rlcs.config import load_config
from rlcs.images import decode_image
from rlcs.prompts import force_answer_ids, render_prompt


def test_demo_documents_fit_the_packed_rows(tiny_vlm, tmp_path):
    hi = load_config(DEFAULT_CONFIG).data.synthetic.difficulty[1]
    # the hard end of the demo's range writes the longest captions (most shapes, most elements)
    data = [f"run.root={tmp_path}", f"data.synthetic.difficulty={json.dumps([hi, hi])}",
            'data.synthetic.sizes={"rl_train": 6, "heldout": 1, "sft": 6, "pretrain": 6}']  # fmt: skip
    stage = {
        s: load_config(DEFAULT_CONFIG, [f"stage={s}", *data]) for s in ("pretrain", "sft", "rl")
    }
    cfg = stage["rl"]
    seq_len = cfg.data.seq_len
    tokenizer, processor = load_processors(tiny_vlm)

    def opened(s: str) -> list[dict]:  # the stage's rows as the driver hands them to the learner
        rows = load_stage_data(stage[s], cfg.run_dir).rows
        return supervised_batch(rows, 0, len(rows), seed=0)

    pre = pretrain_documents(opened("pretrain"), tokenizer, processor, seq_len)
    sft = sft_documents(opened("sft"), tokenizer, processor, seq_len)
    domains = len(cfg.data.synthetic.domains)
    assert len(pre) == len(sft) == 6 * domains

    budget = cfg.rollout.max_think_tokens + cfg.rollout.max_answer_tokens
    budget += len(force_answer_ids(tokenizer))  # a force-answered rollout gets both tags appended
    items = load_stage_data(cfg, cfg.run_dir).items
    assert len(items) == 6 * domains
    longest_rl = 0
    for item in items:
        images = [decode_image(ref, Path("/")) for ref in item.images]
        prompt = processor(render_prompt(item, tokenizer), images)["input_ids"][0]
        longest_rl = max(longest_rl, len(prompt) + budget)
    longest = max(longest_rl, *(len(d) for d in pre + sft))
    assert longest <= seq_len, f"a demo document of {longest} tokens exceeds seq_len={seq_len}"
    # and the rows are not far longer than the documents: that is what makes them cheap
    assert seq_len <= 4 * longest


def test_the_demos_tokenizer_learns_from_the_training_splits_only_when_asked():
    from cluster.demo import corpus_overrides

    files = {s: Path(f"/d/{s}.jsonl") for s in ("pretrain", "sft", "rl_train", "heldout")}
    assert corpus_overrides(load_config(DEFAULT_CONFIG), files) == []  # byte-level: nothing
    merged = load_config(DEFAULT_CONFIG, ["model.tokenizer_merges=512"])
    (only,) = corpus_overrides(merged, files)
    corpus = load_config(DEFAULT_CONFIG, [only]).model.tokenizer_corpus
    assert corpus == ["/d/pretrain.jsonl", "/d/sft.jsonl", "/d/rl_train.jsonl"]  # no held-out
