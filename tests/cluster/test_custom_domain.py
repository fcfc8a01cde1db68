"""A domain of the user's own (``reward.custom_domains``): its items load, their ground truths
are checked by its verifier. An RL run that scores a custom domain's rollouts with its verifier
in the reward actors is tests/cluster/test_train.py's overlapped run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cluster.stage_data import load_stage_data
from rlcs.config import load_config
from rlcs.data import DatasetError

VERIFIER = '''
from rewards import Verdict, Verifier


class Quarter(Verifier):
    """Scores every answer 0.25, so that a run shows this verifier scored it."""

    def check_answer(self, answer):
        return None if isinstance(answer, str) and answer else "the answer must be a word"

    def verify(self, extracted, answer, options):
        return Verdict(0.25)
'''


@pytest.fixture
def custom(tmp_path, monkeypatch):
    """A module ``quarter_verifier`` on the path, and 8 items of its domain ``quarter``."""
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "quarter_verifier.py").write_text(VERIFIER)
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    rows = [{"id": f"q{i}", "domain": "quarter", "prompt": f"say {i}", "answer": str(i)}
            for i in range(8)]  # fmt: skip
    data = tmp_path / "rl.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path, data, rows


def _config(tmp_path: Path, data: Path, *sets: str):
    return load_config(None, ["model.tiny=text", f"data.train={json.dumps([str(data)])}",
                              f"run.root={tmp_path / 'runs'}", *sets])  # fmt: skip


def test_items_of_a_custom_domain_load_and_its_verifier_checks_them(custom):
    tmp_path, data, rows = custom
    with pytest.raises(DatasetError, match="unknown domain 'quarter'"):  # not registered
        load_stage_data(_config(tmp_path, data), tmp_path / "r0")
    domains = 'reward.custom_domains={"quarter": "quarter_verifier:Quarter"}'
    items = load_stage_data(_config(tmp_path, data, domains), tmp_path / "r1").items
    assert [it.id for it in items] == [r["id"] for r in rows]
    rows[3]["answer"] = ""
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DatasetError, match="item 'q3' has an answer .*: the answer must be a word"):
        load_stage_data(_config(tmp_path, data, domains), tmp_path / "r2")
    bad = 'reward.custom_domains={"quarter": "no_such_module:Quarter"}'
    with pytest.raises(ValueError, match="reward.custom_domains: 'quarter': cannot load"):
        load_stage_data(_config(tmp_path, data, bad), tmp_path / "r3")
