"""A config's ``data.synthetic`` section, as the driver turns it into a run's data."""

from __future__ import annotations

import json

from cluster.stage_data import data_files, load_stage_data
from rlcs.config import load_config


def test_synthetic_data_follows_each_domains_difficulty_range(tmp_path):
    syn = ['data.synthetic={"domains": ["math", "ocr"], "difficulty": [0.0, 0.3], '
           '"domain_difficulty": {"ocr": [0.5, 0.7]}, '
           '"sizes": {"rl_train": 8, "heldout": 2, "sft": 2, "pretrain": 2}}']  # fmt: skip
    cfg = load_config(None, ["model.tiny=vlm", f"run.root={tmp_path}", *syn])
    items = load_stage_data(cfg, cfg.run_dir).items
    assert {it.domain for it in items} == {"math", "ocr"}
    for it in items:
        lo, hi = (0.5, 0.7) if it.domain == "ocr" else (0.0, 0.3)
        assert lo <= it.meta["difficulty"] <= hi, (it.id, it.meta["difficulty"])
    # the section is recorded beside the data; a changed range builds it again
    marker = cfg.run_dir / "data" / "done.json"
    assert json.loads(marker.read_text())["domain_difficulty"] == {"ocr": [0.5, 0.7]}
    cfg.data.synthetic.domain_difficulty = {"ocr": [0.9, 1.0]}
    train, _ = data_files(cfg, cfg.run_dir)
    ocr = [json.loads(line) for line in train[0].read_text().splitlines() if '"ocr"' in line]
    assert ocr and all(r["meta"]["difficulty"] >= 0.9 for r in ocr)


def test_rl_items_whose_ground_truth_cannot_be_scored_stop_the_stage(tmp_path):
    import pytest

    from rlcs.data import DatasetError

    rows = [{"id": f"g{i}", "domain": "grounding", "prompt": "where?", "answer": [[0, 0, 9, 9]]}
            for i in range(9)]  # fmt: skip
    rows[2]["answer"], rows[5]["answer"] = [[0, 0, 9]], "nowhere"
    rows.append({"id": "c0", "domain": "gui", "prompt": "do", "answer": {"action": "fly"}})
    data = tmp_path / "rl.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    sets = [f"data.train={json.dumps([str(data)])}", f"run.root={tmp_path}", "model.tiny=text"]
    cfg = load_config(None, sets)
    with pytest.raises(DatasetError) as err:
        load_stage_data(cfg, cfg.run_dir)
    assert str(err.value).startswith(
        f"{data}: item 'g2' has an answer no verifier can score against: ground truth: a box "
        "is [x1, y1, x2, y2], got [0, 0, 9] (and 2 more: ['g5', 'c0'])"
    )
