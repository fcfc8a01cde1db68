"""A domain of the user's own (``reward.custom_domains``): its items load, their ground truths
are checked by its verifier, and an RL run scores them with it in the reward actors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cluster.stage_data import load_stage_data
from rlcs.config import load_config
from rlcs.data import DatasetError

ROOT = Path(__file__).resolve().parents[2]

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


@pytest.mark.slow
def test_an_rl_run_scores_a_custom_domain_with_its_verifier(custom):
    tmp_path, data, _ = custom
    sets = ["data.synthetic=null", f"data.train={json.dumps([str(data)])}",
            'reward.custom_domains={"quarter": "quarter_verifier:Quarter"}',
            "reward.format=bare", "rollout.n=2", "rollout.max_think_tokens=8",
            "rollout.max_answer_tokens=6", "run.prompts_per_iteration=4", "run.iterations=2",
            f"run.root={tmp_path / 'runs'}"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "mods"), str(ROOT)])}
    r = subprocess.run(
        [str(Path(sys.executable).with_name("rlcs")), "train", "configs/tiny-text.yaml",
         *[a for s in sets for a in ("--set", s)]],
        capture_output=True, text=True, timeout=600, cwd=ROOT, env=env,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-4000:]
    recs = [json.loads(line) for line in (tmp_path / "runs" / "tiny-text" / "metrics.jsonl")
            .read_text().splitlines()]  # fmt: skip
    assert [m["step"] for m in recs] == [1, 2]
    # the reward actors loaded the verifier by its path and scored every answer with it
    for m in recs:
        assert m["reward/quarter"] == pytest.approx(0.25) and m["errors/reward"] == 0
