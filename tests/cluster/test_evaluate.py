"""Held-out evaluation (cluster.evaluate) and `rlcs eval` (cluster.eval_command): the figures
the demo and the benchmarks report."""

import shutil
from collections import defaultdict
from pathlib import Path

import pytest

from cluster.evaluate import eval_summary, evaluate, figures
from rlcs.config import RolloutConfig
from rlcs.data import Item


def _greedy(per: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """The figures worked out by hand from each domain's rewards (one answer an item)."""
    out = {d: {"pass_rate": sum(x >= 1.0 for x in v) / len(v), "reward": sum(v) / len(v)}
           for d, v in sorted(per.items())}  # fmt: skip
    out["all"] = {k: sum(v[k] for v in out.values()) / len(out) for k in ("pass_rate", "reward")}
    return out


def _same(got: dict, want: dict) -> bool:
    return list(got) == list(want) and all(got[d] == pytest.approx(want[d]) for d in want)


def test_figures_count_only_full_rewards_as_passes_and_average_domains():
    per = {"math": [1.0, 0.0, 1.0, 1.0], "grounding": [0.5, 1.0]}
    out = figures(eval_summary([
        {"id": f"{d}{i}", "domain": d, "reward": x, "error": None, "passed": x >= 1.0}
        for d, xs in per.items() for i, x in enumerate(xs)
    ]))  # fmt: skip
    assert out["math"] == {"pass_rate": 0.75, "reward": 0.75}
    # a partial reward adds to the mean reward, not to the pass rate
    assert out["grounding"] == {"pass_rate": 0.5, "reward": 0.75}
    # "all" weighs every domain alike, whatever its number of items
    assert out["all"] == {"pass_rate": pytest.approx(0.625), "reward": pytest.approx(0.75)}
    assert list(out) == ["grounding", "math", "all"]
    assert _same(out, _greedy(per))


def test_evaluate_without_a_ray_connection_says_so_instead_of_joining_any_cluster(
    monkeypatch, tmp_path
):
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    with pytest.raises(RuntimeError, match="needs a Ray connection.*connect_ray"):
        evaluate(tmp_path / "no-model", [], RolloutConfig(engine="hf"))


@pytest.fixture(scope="module")
def ray_two_cpus():
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _items(tmp_path) -> list[Item]:
    """Three held-out items each of math and grounding, with absolute image paths."""
    from cluster.stage_data import absolute_images
    from rlcs.data import load_items
    from rlcs.tasks import build_task_data

    sizes = {"rl_train": 1, "heldout": 3, "sft": 1, "pretrain": 1}
    files = build_task_data(tmp_path / "data", sizes=sizes, domains=("math", "grounding"),
                            difficulty=(0.0, 0.3), progress=False)  # fmt: skip
    return [absolute_images(it, files["heldout"].parent) for it in load_items(files["heldout"])]


def _cpus_back(ray, total: float = 2.0, timeout_s: float = 30.0) -> bool:
    """Whether the evaluation's actor gave its CPUs back (a kill takes effect asynchronously)."""
    import time

    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if ray.available_resources().get("CPU", 0.0) >= total:
            return True
        time.sleep(0.2)
    return False


def test_evaluate_scores_the_greedy_answers_of_an_actor_and_frees_it(
    ray_two_cpus, tiny_vlm, tmp_path
):
    import rewards
    from actors.rollout.worker import RolloutWorkerImpl

    items = _items(tmp_path)
    rollout = RolloutConfig(engine="hf", max_think_tokens=8, max_answer_tokens=8, temperature=0.9)
    got = evaluate(tiny_vlm, items, rollout, num_cpus=2)

    # the same model answering greedily in this process, scored by the same verifiers
    cfg = rollout.model_copy(update={"n": 1, "temperature": 0.0})
    trajs = RolloutWorkerImpl(str(tiny_vlm), cfg.model_dump()).generate(
        items, n=1, step=0, temperature=0.0
    )
    scored = rewards.score_batch(
        [{"domain": it.domain, "response": t.response, "answer": it.answer}
         for it, t in zip(items, trajs, strict=True)]
    )  # fmt: skip
    per = defaultdict(list)
    for it, r in zip(items, scored, strict=True):
        per[it.domain].append(r.reward)
    assert _same(got, _greedy(per))
    assert set(got) == {"math", "grounding", "all"}
    assert _cpus_back(ray_two_cpus)
    # cluster.ship_images: the worker gets the images' bytes instead of their paths, and
    # answers the same
    from cluster.evaluate import answer_items

    shipped = answer_items(tiny_vlm, items, rollout, num_cpus=2, ship_images=True)
    assert [r["response"] for r in shipped] == [t.response for t in trajs]
    assert _cpus_back(ray_two_cpus)


def test_several_workers_answer_as_one_does(ray_two_cpus, tiny_vlm, tmp_path):
    """Batches go to whichever worker is free, each seeded by its place in the items: two
    workers give the same sampled answers, in item order, as one."""
    from cluster.evaluate import answer_items

    items = _items(tmp_path)
    rollout = RolloutConfig(engine="hf", max_think_tokens=8, max_answer_tokens=8)
    kw = {"samples": 2, "temperature": 0.9, "num_cpus": 1, "batch_items": 2}
    one = answer_items(tiny_vlm, items, rollout, workers=1, **kw)
    two = answer_items(tiny_vlm, items, rollout, workers=2, **kw)
    assert [(r["id"], r["sample"]) for r in two] == [(it.id, k) for it in items for k in (0, 1)]
    assert [r["response"] for r in two] == [r["response"] for r in one]
    assert len({r["response"] for r in one}) > 1  # sampled: the comparison means something
    assert _cpus_back(ray_two_cpus)
    with pytest.raises(ValueError, match="workers must be at least 1, got 0"):
        answer_items(tiny_vlm, items, rollout, workers=0)


def test_a_failed_evaluation_raises_and_still_frees_its_actor(ray_two_cpus, tiny_vlm, tmp_path):
    items = _items(tmp_path)
    broken = items[0].model_copy(update={"images": [str(tmp_path / "no-such-image.png")]})
    rollout = RolloutConfig(engine="hf", max_think_tokens=8, max_answer_tokens=8)
    with pytest.raises(Exception, match="no-such-image"):
        evaluate(tiny_vlm, [broken, *items[1:]], rollout, num_cpus=1)
    assert _cpus_back(ray_two_cpus)


def _record(item_id, domain, passed, error=None, reward=None, sample=0):
    return {"id": item_id, "domain": domain, "sample": sample, "passed": passed, "error": error,
            "reward": float(passed) if reward is None else reward}  # fmt: skip


def test_eval_summary_gives_pass_rate_pass_at_k_and_keeps_unscorable_answers_apart():
    from cluster.eval_command import summary_table
    from cluster.evaluate import eval_summary

    records = [
        _record("m1", "math", True), _record("m1", "math", False, "format", sample=1),
        _record("m2", "math", False, "timeout"), _record("m2", "math", False, sample=1),
        _record("g1", "grounding", False, reward=0.4), _record("g1", "grounding", True, sample=1),
    ]  # fmt: skip
    s = eval_summary(records)
    assert list(s) == ["grounding", "math", "all"]
    assert s["math"] == {
        "items": 2, "answers": 4, "pass_rate": 0.25, "pass_at_k": 0.5, "reward": 0.25,
        "errors": {"format": 1, "timeout": 1}, "unscorable": 1,
    }  # fmt: skip
    assert s["grounding"]["pass_rate"] == 0.5 and s["grounding"]["pass_at_k"] == 1.0
    assert s["grounding"]["reward"] == pytest.approx(0.7)
    # "all" weighs domains alike, like the demo's figures, and adds up counts
    assert s["all"]["pass_rate"] == pytest.approx(0.375)
    assert s["all"]["pass_at_k"] == pytest.approx(0.75)
    assert s["all"]["items"] == 3 and s["all"]["answers"] == 6
    assert s["all"]["errors"] == {"format": 1, "timeout": 1} and s["all"]["unscorable"] == 1
    assert eval_summary([]) == {}

    table = summary_table(s, samples=2).splitlines()
    assert "pass@2" in table[0] and "unscorable" in table[0]
    assert table[2].split() == ["math", "2", "25.0%", "50.0%", "0.250", "1", "1"]
    assert "pass@" not in summary_table(s, samples=1)


def test_answer_items_rejects_requests_it_cannot_honour_before_starting_a_worker(tmp_path):
    from cluster.evaluate import answer_items

    items = [Item(id="a", domain="math", prompt="p", answer="1")]
    rollout = RolloutConfig(engine="hf")
    with pytest.raises(ValueError, match="several greedy answers"):
        answer_items(tmp_path, items, rollout, samples=2, temperature=0.0)
    with pytest.raises(ValueError, match="samples must be at least 1"):
        answer_items(tmp_path, items, rollout, samples=0)
    with pytest.raises(ValueError, match="'a' appears more than once"):
        answer_items(tmp_path, items * 2, rollout)
    with pytest.raises(ValueError, match="batch_items"):
        answer_items(tmp_path, items, rollout, batch_items=0)


def _eval_args(model, data, **kw):
    import argparse

    base = dict(
        model=str(model), data=[str(p) for p in data], config=None, samples=1, temperature=None,
        out=None, overwrite=False, cpus=1.0, workers=1, batch_items=2, step=None,
        overrides=["rollout.max_think_tokens=8", "rollout.max_answer_tokens=8"],
    )  # fmt: skip
    return argparse.Namespace(**{**base, **kw})


def test_rlcs_eval_reports_the_demos_figures_and_writes_every_answer(
    ray_two_cpus, tiny_vlm, tmp_path, capsys
):
    import json

    from cluster.eval_command import main
    from cluster.evaluate import eval_summary
    from rlcs.data import load_items
    from rlcs.tasks import build_task_data

    sizes = {"rl_train": 1, "heldout": 3, "sft": 1, "pretrain": 1}
    files = build_task_data(tmp_path / "data", sizes=sizes, domains=("math", "grounding"),
                            difficulty=(0.0, 0.3), progress=False)  # fmt: skip
    heldout = files["heldout"]

    # greedy, in batches of 2 items: the figures `evaluate` gives the demo, one answer an item
    answers = tmp_path / "answers" / "a.jsonl"
    assert main(_eval_args(tiny_vlm, [heldout], out=str(answers))) == 0
    out = capsys.readouterr().out
    result = json.loads(out.splitlines()[-1].removeprefix("RESULT "))
    want = evaluate(tiny_vlm, _items(tmp_path / "again"), RolloutConfig(
        engine="hf", max_think_tokens=8, max_answer_tokens=8), num_cpus=1)  # fmt: skip
    assert {d: {k: v[k] for k in ("pass_rate", "reward")} for d, v in result["summary"].items()} \
        == want  # fmt: skip
    assert "one greedy answer per item" in out and result["temperature"] == 0.0
    ids = [it.id for it in load_items(heldout)]
    assert [json.loads(line)["id"] for line in answers.read_text().splitlines()] == ids

    # an existing --out is replaced only when asked to
    args = _eval_args(tiny_vlm, [heldout], samples=3, temperature=1.0, out=str(answers))
    assert main(args) == 2
    assert "a.jsonl exists; give another file, or --overwrite" in capsys.readouterr().err
    # sampled: K answers per item, all written, in item order, and the summary is theirs
    args.overwrite = True
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out.splitlines()[-1].removeprefix("RESULT "))
    rows = [json.loads(line) for line in answers.read_text().splitlines()]
    assert [(r["id"], r["sample"]) for r in rows] == [(i, k) for i in ids for k in range(3)]
    assert all(r["passed"] == (r["error"] is None and r["reward"] >= 1.0) for r in rows)
    assert result["summary"] == eval_summary(rows)
    assert result["summary"]["all"]["answers"] == 3 * len(ids)
    # the untrained model's answers are malformed: wrong answers, not unscorable ones
    assert sum(result["summary"]["all"]["errors"].values()) > 0
    assert result["summary"]["all"]["unscorable"] == 0

    # bad input: a clear message and exit code 2, nothing written
    for bad, message in [
        (dict(samples=2, temperature=0.0), "one greedy answer"),
        (dict(model=str(tmp_path)), "neither a Hugging Face model directory"),
        (dict(data=[str(tmp_path / "none.jsonl")]), "no such item file"),
        (dict(out=str(heldout)), "is one of the inputs"),
        (dict(overrides=["rollout.no_such_key=1"]), "no_such_key"),
    ]:
        assert main(_eval_args(**{"model": tiny_vlm, "data": [heldout], **bad})) == 2
        assert message in capsys.readouterr().err
    assert load_items(heldout)  # the input is intact

    # a run directory: its final model, or a checkpoint's copy, with its config and data.eval
    from rlcs.config import load_config

    run = tmp_path / "run"
    cfg = load_config("configs/tiny-vlm.yaml", [
        "data.synthetic=null", f"data.train=[{heldout}]", f"data.eval=[{heldout}]",
        "rollout.max_think_tokens=8", "rollout.max_answer_tokens=8",
    ])  # fmt: skip
    shutil.copytree(tiny_vlm, run / "hf")
    shutil.copytree(tiny_vlm, run / "checkpoints" / "step_00000003" / "hf")
    (run / "config.yaml").write_text(cfg.to_yaml())
    greedy = _eval_args(model=run, data=[], overrides=[])
    # which model --step picks is checked in
    # test_eval_targets_name_the_model_config_and_items_or_say_what_is_missing
    assert main(greedy) == 0
    got = json.loads(capsys.readouterr().out.splitlines()[-1].removeprefix("RESULT "))
    assert {d: {k: v[k] for k in ("pass_rate", "reward")} for d, v in got["summary"].items()} \
        == want  # fmt: skip
    greedy.step = 5
    assert main(greedy) == 2
    assert "no Hugging Face copy of step 5" in (err := capsys.readouterr().err)
    assert "steps with one: step_00000003" in err


def test_eval_targets_name_the_model_config_and_items_or_say_what_is_missing(
    tmp_path, tiny_text_model
):
    from cluster.eval_command import EvalTargetError, resolve_target
    from rlcs.config import load_config

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    with pytest.raises(EvalTargetError, match="model: no weights"):  # said before Ray starts
        resolve_target(model, None, None, ["a.jsonl"])
    shutil.rmtree(model)
    shutil.copytree(tiny_text_model, model)
    got, cfg, files = resolve_target(
        model, None, None, ["a.jsonl"], ["rollout.max_answer_tokens=7"]
    )
    assert got == model and files == [Path("a.jsonl")] and cfg.rollout.max_answer_tokens == 7
    # the RL group size means nothing here (an RL run's config refused 1 as a group of one)
    for n in ("1", "3"):
        with pytest.raises(EvalTargetError, match="rlcs eval does not use it: give --samples K"):
            resolve_target(model, None, None, ["a.jsonl"], [f"rollout.n={n}"])
    assert cfg.model.tiny == "vlm"  # the default config, configs/tiny-vlm.yaml
    with pytest.raises(EvalTargetError, match="give the item files"):
        resolve_target(model, None, None, [])
    with pytest.raises(EvalTargetError, match="--step needs a run directory"):
        resolve_target(model, 2, None, ["a.jsonl"])
    with pytest.raises(EvalTargetError, match="neither a Hugging Face model directory"):
        resolve_target(tmp_path, None, None, ["a.jsonl"])

    # a synthetic-data run reads its own held-out split
    run = tmp_path / "demo" / "rl"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(load_config("configs/tiny-vlm.yaml").to_yaml())
    with pytest.raises(EvalTargetError, match="a run per stage.*e.g. .*sft or .*rl"):
        resolve_target(tmp_path / "demo", None, None, [])
    with pytest.raises(EvalTargetError, match="the run has not finished"):
        resolve_target(run, None, None, [])
    with pytest.raises(EvalTargetError, match="none was kept: run with run.export_hf_checkpoints"):
        resolve_target(run, 4, None, [])
    shutil.copytree(model, run / "hf")
    shutil.copytree(model, run / "checkpoints" / "step_00000004" / "hf")
    got, cfg, files = resolve_target(run, None, None, [])
    assert got == run / "hf" and files == [run / "data" / "heldout.jsonl"]
    got, _, _ = resolve_target(run, 4, None, ["b.jsonl"])
    assert got == run / "checkpoints" / "step_00000004" / "hf"
    with pytest.raises(EvalTargetError, match="steps with one: step_00000004"):
        resolve_target(run, 8, None, [])

    # a run on item files reads its data.eval, and says so when it names none
    text = tmp_path / "text"
    shutil.copytree(model, text / "hf")
    on_files = ["data.synthetic=null", "data.train=[t.jsonl]"]
    for evals in ("[e.jsonl]", "[]"):
        cfg = load_config("configs/tiny-text.yaml", [*on_files, f"data.eval={evals}"])
        (text / f"config{evals == '[]'}.yaml").write_text(cfg.to_yaml())
    shutil.copy(text / "configFalse.yaml", text / "config.yaml")
    assert resolve_target(text, None, None, [])[2] == [Path("e.jsonl")]
    shutil.copy(text / "configTrue.yaml", text / "config.yaml")
    with pytest.raises(EvalTargetError, match="names no data.eval"):
        resolve_target(text, None, None, [])


def test_eval_and_grade_workers_take_the_configs_gpus():
    """On a GPU cluster each worker takes cluster.rollout_gpus_per_worker GPUs (a
    tensor-parallel vLLM engine needs them all); before, they asked Ray for none."""
    from cluster.placement import worker_gpus
    from rlcs.config import load_config

    root = Path(__file__).resolve().parents[2] / "configs"
    assert worker_gpus(load_config(root / "glm4v-9b-4node.yaml").cluster) == 2
    assert worker_gpus(load_config(root / "glm4v-9b-8xh100.yaml").cluster) == 1
    assert worker_gpus(load_config(root / "tiny-vlm.yaml").cluster) == 0


def test_eval_and_grade_score_with_the_runs_verifier_options_and_dtype(tmp_path, monkeypatch):
    """`rlcs eval` and `rlcs grade` score as the run's reward pool does (a run trained on
    \\boxed{} answers scored 0 in them, the format of the default scorer), and load the model
    in the run's model.dtype."""
    import cluster.evaluate
    import cluster.ray_connect
    from cluster.eval_command import eval_files
    from cluster.evaluate import score_trajectories
    from cluster.grade import grade_files
    from rlcs.config import load_config
    from rlcs.data import Trajectory

    item = Item(id="m0", domain="math", prompt="2+3?", answer="5")
    boxed = Trajectory("m0", "<think>2+3</think><answer>\\boxed{5}</answer>", [1], [-0.1], "stop")
    assert score_trajectories([boxed], {"m0": item})[0].error == "format"
    (res,) = score_trajectories([boxed], {"m0": item}, options={"format": "boxed"})
    assert (res.reward, res.error) == (1.0, None)

    data = tmp_path / "items.jsonl"
    data.write_text('{"id": "m0", "domain": "math", "prompt": "2+3?", "answer": "5"}\n')
    cfg = load_config(None, ["model.tiny=text", "reward.format=boxed", "model.dtype=bfloat16",
                             "reward.math_rel_tol=0.01", "rollout.temperature=0.7"])  # fmt: skip
    asked = []

    def answer_items(*args, **kwargs):
        asked.append((kwargs["reward_options"], kwargs["dtype"]))
        raise RuntimeError("stop here")

    monkeypatch.setattr(cluster.ray_connect, "connect_ray", lambda cfg: None)
    monkeypatch.setattr(cluster.evaluate, "answer_items", answer_items)
    monkeypatch.setattr("cluster.eval_command.answer_items", answer_items)
    out = tmp_path / "g.jsonl"
    for run in (lambda: eval_files(cfg, tmp_path, [data], progress=False),
                lambda: grade_files(cfg, tmp_path, [data], out, 2, 1.0, False)):  # fmt: skip
        with pytest.raises(RuntimeError, match="stop here"):
            run()
    want = {"format": "boxed", "rel_tol": 0.01, "iou_threshold": 0.5, "partial_credit": False,
            "max_repetition": 0.5, "max_language_mix": 0.3}  # fmt: skip
    assert asked == [(want, "bfloat16")] * 2
