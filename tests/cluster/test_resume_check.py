"""--resume refuses to change a run's stage or its tiny model, and names the other settings it
changes, before anything of the run is touched."""

import json
import logging
import re
from pathlib import Path

import pytest

from cluster.resume_check import (
    ResumeConflict,
    changes,
    check_resume_settings,
    report_resume_changes,
)
from cluster.run_dir import prepare_run_dir
from rlcs.config import load_config
from rlcs.runlog import write_resolved

ROOT = Path(__file__).resolve().parents[2]
SFT = ["stage=sft", "model.tiny=text"]


def saved(tmp_path: Path, sets: list[str]):
    cfg = load_config(ROOT / "configs" / "tiny-text.yaml", [*sets, f"run.root={tmp_path}"])
    write_resolved(cfg, cfg.run_dir)
    (cfg.run_dir / "metrics.jsonl").write_text('{"step": 1, "stage": "sft"}\n')
    return cfg


def test_a_run_resumed_as_another_stage_is_refused_and_keeps_its_files(tmp_path):
    """An SFT run resumed as RL would find no RL checkpoint, start at step 0 and write over the
    SFT run's metrics, checkpoints and model."""
    cfg = saved(tmp_path, SFT)
    before = (cfg.run_dir / "config.yaml").read_text()
    rl = load_config(ROOT / "configs" / "tiny-text.yaml", ["stage=rl", f"run.root={tmp_path}"])
    with pytest.raises(ResumeConflict) as err:
        prepare_run_dir(rl, resume=True)
    assert str(err.value) == (
        f"--resume: a resumed run cannot change stage of the run in {cfg.run_dir} (stage: "
        "'sft' -> 'rl', saved -> asked); resume it with its own settings, or start a new run "
        "(--set run.name=<new name>)"
    )
    assert (cfg.run_dir / "config.yaml").read_text() == before
    assert (cfg.run_dir / "metrics.jsonl").read_text() == '{"step": 1, "stage": "sft"}\n'


def test_the_tiny_model_a_run_built_cannot_change(tmp_path):
    cfg = saved(tmp_path, SFT)
    wider = load_config(
        ROOT / "configs" / "tiny-text.yaml",
        [*SFT, f"run.root={tmp_path}", 'model.tiny_overrides={"hidden_size": 128}'],
    )
    with pytest.raises(
        ResumeConflict,
        match=r"cannot change model.tiny_overrides.hidden_size of the run in \S+ "
        r"\(model.tiny_overrides.hidden_size: None -> 128, saved -> asked\);",
    ):
        check_resume_settings(wider, cfg.run_dir)
    # read from model.path, the run never used its tiny settings: they may change
    from_path = saved(tmp_path / "p", ["stage=sft", "model.path=/models/m"])
    other = load_config(
        ROOT / "configs" / "tiny-text.yaml",
        ["stage=sft", "model.path=/models/m", f"run.root={tmp_path / 'p'}", "model.tiny=vlm"],
    )
    check_resume_settings(other, from_path.run_dir)
    assert report_resume_changes(other, from_path.run_dir) == {}


def test_the_tiny_models_tokenizer_cannot_change_and_older_runs_had_none(tmp_path):
    import yaml

    cfg = saved(tmp_path, SFT)
    merged = load_config(
        ROOT / "configs" / "tiny-text.yaml",
        [*SFT, f"run.root={tmp_path}", "model.tokenizer_merges=64"],
    )
    with pytest.raises(
        ResumeConflict, match=r"cannot change model.tokenizer_merges of the run in \S+ \(.*0 -> 64"
    ):
        check_resume_settings(merged, cfg.run_dir)
    # a run saved before these settings existed ran with their defaults: resuming it is no change
    path = cfg.run_dir / "config.yaml"
    old = yaml.safe_load(path.read_text())
    for key in ("tokenizer_merges", "tokenizer_corpus"):
        del old["model"][key]
    del old["run"]["overlap_rollout"]  # any setting added later, not only the tokenizer's
    path.write_text(yaml.safe_dump(old))
    check_resume_settings(cfg, cfg.run_dir)
    assert report_resume_changes(cfg, cfg.run_dir) == {}
    with pytest.raises(ResumeConflict, match=r"model.tokenizer_merges: None -> 64"):
        check_resume_settings(merged, cfg.run_dir)


def test_an_rl_runs_derived_lr_horizon_follows_its_iterations(tmp_path, caplog):
    """RL's learner.steps is run.iterations x mini-batches unless set: more iterations on
    resume is one change, and the horizon (not in config.yaml) grows with it."""
    cfg = saved(tmp_path, ["run.iterations=4"])
    longer = load_config(cfg.run_dir / "config.yaml", ["run.iterations=9"])
    assert longer.learner.steps == 9
    with caplog.at_level(logging.WARNING):
        assert report_resume_changes(longer, cfg.run_dir) == {"run.iterations": (4, 9)}


def test_other_changes_apply_and_are_named(tmp_path, caplog):
    cfg = saved(tmp_path, SFT)
    longer = load_config(
        ROOT / "configs" / "tiny-text.yaml",
        [*SFT, f"run.root={tmp_path}", "learner.steps=40", "learner.lr=3e-4"],
    )
    with caplog.at_level(logging.WARNING):
        check_resume_settings(longer, cfg.run_dir)
        diff = report_resume_changes(longer, cfg.run_dir)
    assert diff == {
        "learner.lr": (cfg.learner.lr, 3e-4),
        "learner.steps": (cfg.learner.steps, 40),
    }
    (record,) = caplog.records
    assert "apply from here on: learner.lr: " in record.getMessage()
    with caplog.at_level(logging.WARNING):
        assert report_resume_changes(cfg, cfg.run_dir) == {}
    assert len(caplog.records) == 1


def test_changes_compare_nested_sections_key_by_key():
    a = {"model": {"tiny": "text", "tiny_overrides": {"text": {"hidden_size": 64}}}, "x": [1]}
    b = {"model": {"tiny": "text", "tiny_overrides": {"text": {"hidden_size": 96}}}, "x": [1]}
    assert changes(a, b) == {"model.tiny_overrides.text.hidden_size": (64, 96)}
    assert changes({"d": {}}, {"d": {"math": 1.0}}) == {"d.math": (None, 1.0)}
    assert changes({"s": {"a": 1, "b": 2}}, {"s": None}) == {"s": ({"a": 1, "b": 2}, None)}


def rl_run_with_state(tmp_path: Path, n: int = 6):
    from actors.sampler import LocalCurriculumSampler
    from rlcs.data import Item

    cfg = load_config(ROOT / "configs" / "tiny-text.yaml", [f"run.root={tmp_path}"])
    write_resolved(cfg, cfg.run_dir)
    items = [Item(id=f"m-{i}", domain="math", prompt="?", answer="1") for i in range(n)]
    LocalCurriculumSampler(cfg.run_dir, items=items, config=cfg.curriculum).save()
    return cfg, {it.id for it in items}


def test_a_resumed_rl_run_needs_the_items_its_curriculum_draws(tmp_path):
    from cluster.resume_check import check_resume_items

    cfg, ids = rl_run_with_state(tmp_path)
    check_resume_items(cfg.run_dir, ids)
    check_resume_items(cfg.run_dir, ids | {"new-item"})  # more items: the sampler keeps its own
    with pytest.raises(ResumeConflict) as err:
        check_resume_items(cfg.run_dir, ids - {"m-1", "m-4"})
    assert str(err.value) == (
        "--resume: the run's curriculum draws from 6 items, and 2 of them are not in data.train "
        "now (e.g. ['m-1', 'm-4']); resume with the data the run started with (the files may "
        "have moved), or start a new run"
    )
    check_resume_items(tmp_path / "no-state", set())  # nothing saved yet: nothing to check


def resumed(tmp_path: Path, *sets: str):
    return load_config(ROOT / "configs" / "tiny-text.yaml", [f"run.root={tmp_path}", *sets])


@pytest.mark.parametrize(
    "change, listed",
    [
        ("data.synthetic.seed=3", "data.synthetic.seed: 0 -> 3"),
        ("data.synthetic.difficulty=[0.2, 0.4]", "data.synthetic.difficulty: [0.0, 1.0] -> [0.2, 0.4]"),
        ("data.synthetic.domain_difficulty={ocr: [0.5, 0.6]}",
         "data.synthetic.domain_difficulty.ocr: None -> [0.5, 0.6]"),
        ("data.synthetic.sizes.rl_train=40", "data.synthetic.sizes.rl_train: 32 -> 40"),
        ("data.synthetic.domains=[math]", "data.synthetic.domains: ['math', 'ocr'] -> ['math']"),
        ("data.synthetic.text_only=false", "data.synthetic.text_only: True -> False"),
    ],
)  # fmt: skip
def test_a_resumed_rl_run_keeps_its_synthetic_items(tmp_path, change, listed):
    """Another seed, difficulty or size rebuilt RUN_DIR/data under the same item ids: the
    resumed sampler's record of each id then described another item. It is refused, before
    anything of the run is touched, saying why and what to do."""
    cfg, _ = rl_run_with_state(tmp_path)
    before = (cfg.run_dir / "config.yaml").read_text()
    with pytest.raises(ResumeConflict) as err:
        prepare_run_dir(resumed(tmp_path, change), resume=True)
    assert str(err.value) == (
        f"--resume: the curriculum of the run in {cfg.run_dir} keeps a record of each RL item it "
        f"has drawn (attempts, successes, tier) by the item's id, and {listed} (saved -> asked) "
        "would build its data again under the same ids: an item would keep its id but not its "
        "content, so the record of that id would describe another item (and items added would "
        "never be drawn: the sampler keeps those it started with; items dropped would be "
        "missing). Resume with the run's own data.synthetic settings, or start a new run on the "
        "new data from this run's model: finish this run with its own data settings (it exports "
        f"its model to {cfg.run_dir / 'hf'}), then --set model.path={cfg.run_dir / 'hf'} --set "
        "run.name=<new name>"
    )
    assert (cfg.run_dir / "config.yaml").read_text() == before
    # a model it exported is the one to start from
    (cfg.run_dir / "checkpoints" / "step_00000004" / "hf").mkdir(parents=True)
    with pytest.raises(ResumeConflict, match=r"this run's model: --set model\.path=\S+/"
                       r"checkpoints/step_00000004/hf --set run\.name=<new name>$"):  # fmt: skip
        check_resume_settings(resumed(tmp_path, change), cfg.run_dir)


def test_synthetic_changes_that_keep_the_rl_items_resume(tmp_path, caplog):
    cfg, _ = rl_run_with_state(tmp_path)
    for same in (
        # the held-out, SFT and pretraining splits: the sampler draws none of them
        ["data.synthetic.sizes.heldout=4", "data.synthetic.sizes.sft=1"],
        # the same items said another way: the order of the domains, a domain's range given
        # as the common one, the default size of a section saved without it
        ["data.synthetic.domains=[ocr, math]", "data.synthetic.domain_difficulty={math: [0, 1]}"],
        # the RL items read from the files the run built (as the demo's stages read theirs)
        ["data.synthetic=null", f"data.train=[{cfg.run_dir / 'data' / 'rl_train.jsonl'}]"],
    ):
        check_resume_settings(resumed(tmp_path, *same), cfg.run_dir)
    with caplog.at_level(logging.WARNING):
        report_resume_changes(resumed(tmp_path, "data.synthetic.sizes.heldout=4"), cfg.run_dir)
    assert "apply from here on: data.synthetic.sizes.heldout: 16 -> 4" in caplog.text
    # a section saved without sizes built 64 of each domain's RL items: asked for, the same
    import yaml

    path = cfg.run_dir / "config.yaml"
    old = yaml.safe_load(path.read_text())
    old["data"]["synthetic"]["sizes"] = {}
    path.write_text(yaml.safe_dump(old))
    check_resume_settings(resumed(tmp_path, "data.synthetic.sizes={rl_train: 64}"), cfg.run_dir)
    with pytest.raises(ResumeConflict, match="data.synthetic.sizes.rl_train: None -> 65"):
        check_resume_settings(resumed(tmp_path, "data.synthetic.sizes={rl_train: 65}"), cfg.run_dir)


def test_synthetic_data_may_change_before_the_sampler_saves_its_state(tmp_path):
    """Until the sampler has saved its state it holds no record of the items: the data is built
    again and the sampler starts from it."""
    cfg = saved(tmp_path, [])
    check_resume_settings(resumed(tmp_path, "data.synthetic.seed=3"), cfg.run_dir)


def test_a_refused_resume_leaves_the_built_data_as_it_was(tmp_path):
    """Through the driver: the check comes before the data is built again (and the run's lock
    file goes with the refused launch)."""
    from cluster.run_lock import LOCK_FILE
    from cluster.train import train

    cfg, _ = rl_run_with_state(tmp_path)
    data = cfg.run_dir / "data"
    data.mkdir()
    marker = cfg.data.synthetic.model_dump(mode="json")
    (data / "done.json").write_text(json.dumps(marker))
    (data / "rl_train.jsonl").write_text("the run's items\n")
    with pytest.raises(ResumeConflict, match="data.synthetic.seed: 0 -> 3"):
        train(resumed(tmp_path, "data.synthetic.seed=3"), resume=True)
    assert json.loads((data / "done.json").read_text()) == marker
    assert (data / "rl_train.jsonl").read_text() == "the run's items\n"
    assert not (cfg.run_dir / LOCK_FILE).exists()


def test_domain_weights_stay_with_the_curriculum_state(tmp_path, caplog):
    cfg, _ = rl_run_with_state(tmp_path)
    asked = load_config(
        ROOT / "configs" / "tiny-text.yaml",
        [f"run.root={tmp_path}", 'data.domain_weights={"math": 1.0}', "run.iterations=9"],
    )
    with caplog.at_level(logging.WARNING):
        report_resume_changes(asked, cfg.run_dir)
    applied, kept = (r.getMessage() for r in caplog.records)
    assert applied.endswith(f"run.iterations: {cfg.run.iterations} -> 9")
    assert kept.endswith(
        "not applied (start a new run to use them): data.domain_weights.math: None -> 1.0"
    )


def test_config_yaml_of_a_resumed_rl_run_records_what_its_sampler_keeps(tmp_path):
    from cluster.resume_check import as_resumed

    cfg, _ = rl_run_with_state(tmp_path)
    asked = load_config(
        ROOT / "configs" / "tiny-text.yaml",
        [f"run.root={tmp_path}", 'data.domain_weights={"math": 1.0}', "run.iterations=9",
         "curriculum.weight_power=1.0"],
    )  # fmt: skip
    ran = as_resumed(asked, cfg.run_dir)
    assert ran.curriculum == cfg.curriculum and ran.curriculum.weight_power != 1.0
    assert ran.data.domain_weights == cfg.data.domain_weights == {}
    assert ran.run.iterations == 9  # the rest is the config given now
    fresh = load_config(ROOT / "configs" / "tiny-text.yaml", [f"run.root={tmp_path / 'new'}"])
    assert as_resumed(fresh, fresh.run_dir) is fresh  # no state saved: nothing kept


def test_the_learner_layout_is_fixed_once_a_checkpoint_holds_it(tmp_path):
    """DeepSpeed loads a ZeRO checkpoint only into the ranks, stage and precision it was saved
    from (2 ranks into 1, ZeRO-2 into ZeRO-3, fp32 into bf16 and back all failed inside the
    learner, after Ray started)."""
    cfg = saved(tmp_path, [*SFT, "learner.num_ranks=2"])
    one_rank = load_config(
        ROOT / "configs" / "tiny-text.yaml",
        [*SFT, f"run.root={tmp_path}", "learner.zero_stage=3", "learner.precision=bf16"],
    )
    check_resume_settings(one_rank, cfg.run_dir)  # no checkpoint yet: the run starts over
    (cfg.run_dir / "checkpoints" / "step_00000002").mkdir(parents=True)
    with pytest.raises(ResumeConflict) as err:
        check_resume_settings(one_rank, cfg.run_dir)
    assert str(err.value) == (
        f"--resume: the learner checkpoint of step 2 in {cfg.run_dir} cannot load with "
        f"learner.num_ranks: 2 -> 1; learner.precision: 'fp32' -> 'bf16'; learner.zero_stage: "
        f"{cfg.learner.zero_stage} -> 3 (saved -> asked): DeepSpeed loads it only into the layout it was saved from; resume with the "
        "run's own settings, or start a new run"
    )


def test_fp32_and_bf16_mixed_checkpoints_are_the_same_layout(tmp_path):
    """bf16-mixed keeps fp32 weights and optimizer state: a run may resume in either (the
    learner's loading of one from the other: tests/actors/test_cpu_attention.py)."""
    cfg = saved(tmp_path, SFT)
    (cfg.run_dir / "checkpoints" / "step_00000002").mkdir(parents=True)
    for precision in ("bf16-mixed", "fp32"):
        asked = load_config(
            ROOT / "configs" / "tiny-text.yaml",
            [*SFT, f"run.root={tmp_path}", f"learner.precision={precision}"],
        )
        check_resume_settings(asked, cfg.run_dir)
    bf16 = load_config(
        ROOT / "configs" / "tiny-text.yaml",
        [*SFT, f"run.root={tmp_path}", "learner.precision=bf16"],
    )
    with pytest.raises(ResumeConflict, match="learner.precision: 'fp32' -> 'bf16'"):
        check_resume_settings(bf16, cfg.run_dir)


def test_a_checkpoint_that_cannot_be_restored_stops_the_run_in_one_line(tmp_path):
    import ray

    from cluster.train import RunFailed, restore

    class Broken:
        root = tmp_path / "checkpoints"

        def restore(self, roles, step):
            cause = RuntimeError("PytorchStreamReader failed reading zip archive\nmore")
            raise ray.exceptions.RayTaskError("Learner.load_checkpoint", "Traceback ...", cause)

    with pytest.raises(RunFailed) as err:
        restore(Broken(), None, 4)
    assert str(err.value) == (
        f"the checkpoint of step 4 in {tmp_path / 'checkpoints'} could not be restored "
        "(RuntimeError: PytorchStreamReader failed reading zip archive); the run's files are as "
        "they were"
    )


@pytest.mark.parametrize(("text", "what"), [("", "empty"), ("- a\n- b\n", "not a config")])
def test_a_saved_config_that_is_empty_or_no_config_stops_the_resume(tmp_path, text, what):
    """An empty or damaged config.yaml leaves the run's settings unknown: resuming would take
    every setting as changed (or fail with a traceback), so it is refused, the files kept."""
    cfg = saved(tmp_path, SFT)
    (cfg.run_dir / "config.yaml").write_text(text)
    with pytest.raises(ResumeConflict, match=f"config.yaml is {what}.*cannot be resumed"):
        prepare_run_dir(cfg, resume=True)
    assert (cfg.run_dir / "config.yaml").read_text() == text
    assert (cfg.run_dir / "metrics.jsonl").read_text() == '{"step": 1, "stage": "sft"}\n'


def sft_run_with_checkpoint(tmp_path: Path, *sets: str, files: int = 2):
    """An SFT run on ``files`` data.train files, as it stands after committing step 2: the
    record of its training data written at its start, the learner's ``latest`` pointer."""
    from cluster.train_data_record import record_train_data

    paths = []
    for i in range(files):
        path = tmp_path / "data" / f"part{i}.jsonl"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps({"prompt": f"{i}+1?", "response":
                                    f"<think>add</think><answer>{i + 1}</answer>"}) + "\n")  # fmt: skip
        paths.append(path)
    train = f"data.train={json.dumps([str(p) for p in paths])}"
    cfg = saved(tmp_path, [*SFT, "data.synthetic=null", train, *sets])
    record_train_data(cfg.run_dir, paths)
    (cfg.run_dir / "checkpoints" / "step_00000002").mkdir(parents=True)
    (cfg.run_dir / "checkpoints" / "latest").write_text("step_00000002")
    return cfg, paths


def test_a_resumed_sft_run_is_refused_training_files_whose_content_changed(tmp_path):
    """The checkpoint's step count, optimizer state and place in the shuffled order describe
    the examples the run started with: an edited data.train file went on from step 2 over
    other examples, unsaid. Refused through the driver, before Ray or the roles start."""
    from cluster.run_lock import LOCK_FILE
    from cluster.train import train

    cfg, (first, second) = sft_run_with_checkpoint(tmp_path)
    before = (cfg.run_dir / "config.yaml").read_text()
    size = second.stat().st_size
    with second.open("a") as f:
        f.write(
            json.dumps({"prompt": "9+1?", "response": "<think>add</think><answer>10</answer>"})
            + "\n"
        )
    with pytest.raises(ResumeConflict) as err:
        train(cfg, resume=True)
    assert str(err.value) == (
        f"--resume: the sft run in {cfg.run_dir} has trained 2 steps on other data than it is "
        f"given now ({second} changed ({size} -> {second.stat().st_size} bytes)): the "
        "checkpoint's step count, optimizer state and place in the examples' shuffled order "
        "describe the data the run started with, and would go on over this data as if they "
        f"described it. Resume with the data the run started with ({first}, {second}; the files "
        "may move, their content may not change), or start a new run on the new data from this "
        f"run's model: finish this run with its own data settings (it exports its model to "
        f"{cfg.run_dir / 'hf'}), then --set model.path={cfg.run_dir / 'hf'} --set "
        "run.name=<new name>"
    )
    assert (cfg.run_dir / "config.yaml").read_text() == before
    assert not (cfg.run_dir / LOCK_FILE).exists()


def test_a_resumed_sft_run_may_move_its_files_but_not_add_or_leave_out_any(tmp_path):
    from cluster.resume_check import check_resume_examples

    cfg, (first, second) = sft_run_with_checkpoint(tmp_path)
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    for p in (first, second):
        (moved / p.name).write_bytes(p.read_bytes())
    check_resume_examples(cfg, cfg.run_dir, [moved / first.name, moved / second.name])
    extra = tmp_path / "data" / "extra.jsonl"
    extra.write_text(second.read_text().replace("1+1", "2+2"))
    for files, what in (
        ([first], f"({second} left out)"),
        ([first, second, extra], f"({extra} added)"),
        ([second, first], "(the same files in another order or number)"),
    ):
        with pytest.raises(
            ResumeConflict, match=re.escape(f"steps on other data than it is given now {what}")
        ):
            check_resume_examples(cfg, cfg.run_dir, files)
    # before its first checkpoint the run starts over, on the data given now; a run made
    # before the record existed has nothing to compare with
    (cfg.run_dir / "checkpoints" / "latest").unlink()
    check_resume_examples(cfg, cfg.run_dir, [extra])
    (cfg.run_dir / "checkpoints" / "latest").write_text("step_00000002")
    (cfg.run_dir / "train_data.json").unlink()
    check_resume_examples(cfg, cfg.run_dir, [extra])


def synthetic_sft_run(tmp_path: Path, *sets: str):
    cfg = saved(tmp_path, [*SFT, *sets])
    (cfg.run_dir / "checkpoints" / "step_00000002").mkdir(parents=True)
    (cfg.run_dir / "checkpoints" / "latest").write_text("step_00000002")
    return cfg


@pytest.mark.parametrize(
    "change, listed",
    [
        ("data.synthetic.seed=3", "data.synthetic.seed: 0 -> 3"),
        ("data.synthetic.sizes.sft=40", "data.synthetic.sizes.sft: 32 -> 40"),
        # the rows follow the domains' order, and the steps' shuffled order the rows
        ("data.synthetic.domains=[ocr, math]", "data.synthetic.domains: ['math', 'ocr'] -> ['ocr', 'math']"),
        ("data.synthetic.difficulty=[0.2, 0.4]", "data.synthetic.difficulty: [0.0, 1.0] -> [0.2, 0.4]"),
    ],
)  # fmt: skip
def test_a_resumed_sft_run_keeps_its_synthetic_examples(tmp_path, change, listed):
    """Refused before RUN_DIR/data is built again, naming the settings that would change the
    SFT split."""
    cfg = synthetic_sft_run(tmp_path)
    with pytest.raises(ResumeConflict) as err:
        prepare_run_dir(resumed(tmp_path, *SFT, change), resume=True)
    assert str(err.value) == (
        f"--resume: the sft run in {cfg.run_dir} has trained 2 steps on the sft examples "
        f"data.synthetic built, and {listed} (saved -> asked) would build others: the "
        "checkpoint's step count, optimizer state and place in the examples' shuffled order "
        "describe the examples the run started with, and would go on over the new ones as if "
        "they described them. Resume with the run's own data.synthetic settings, or start a new "
        "run on the new data from this run's model: finish this run with its own data settings "
        f"(it exports its model to {cfg.run_dir / 'hf'}), then --set model.path="
        f"{cfg.run_dir / 'hf'} --set run.name=<new name>"
    )


def test_synthetic_changes_that_keep_the_supervised_examples_resume(tmp_path):
    cfg = synthetic_sft_run(tmp_path)
    # the other splits' sizes: the SFT split is drawn from a seed of its own
    check_resume_settings(resumed(tmp_path, *SFT, "data.synthetic.sizes.rl_train=4",
                                  "data.synthetic.sizes.pretrain=4"), cfg.run_dir)  # fmt: skip
    pre = synthetic_sft_run(tmp_path / "pre", "stage=pretrain")
    check_resume_settings(
        resumed(tmp_path / "pre", *SFT, "stage=pretrain", "data.synthetic.sizes.sft=4"),
        pre.run_dir,
    )
    with pytest.raises(
        ResumeConflict, match=r"the pretrain run .* data.synthetic.sizes.pretrain: 32 -> 4"
    ):
        check_resume_settings(
            resumed(tmp_path / "pre", *SFT, "stage=pretrain", "data.synthetic.sizes.pretrain=4"),
            pre.run_dir,
        )
    # before its first checkpoint the run starts over, on the data built now
    (cfg.run_dir / "checkpoints" / "latest").unlink()
    check_resume_settings(resumed(tmp_path, *SFT, "data.synthetic.seed=3"), cfg.run_dir)


@pytest.mark.slow
def test_rlcs_train_records_an_sft_runs_data_and_refuses_to_resume_it_over_other_data(tmp_path):
    """A real run records its data.train files at its start; `--resume` after one of them was
    edited stops in one line (exit status 2), and the run's checkpoint and metrics stay."""
    import subprocess
    import sys

    from cluster.train_data_record import recorded_train_data

    data = tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i}+1?", "response":
                    f"<think>add</think><answer>{i + 1}</answer>"}) + "\n" for i in range(4)))  # fmt: skip
    sets = [*SFT, "data.synthetic=null", f"data.train=[{data}]", "learner.steps=2",
            "learner.global_batch=2", "learner.micro_batch=2", "run.save_every=1",
            f"run.root={tmp_path}", "run.name=sft"]  # fmt: skip
    argv = [str(Path(sys.executable).with_name("rlcs")), "train", "configs/tiny-text.yaml",
            *[a for s in sets for a in ("--set", s)]]  # fmt: skip
    first = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert first.returncode == 0, first.stderr[-4000:]
    run = tmp_path / "sft"
    (recorded,) = recorded_train_data(run)
    assert recorded["path"] == str(data) and recorded["bytes"] == data.stat().st_size
    metrics = (run / "metrics.jsonl").read_text()
    data.write_text(data.read_text().replace("0+1?", "0+2?"))
    again = subprocess.run([*argv, "--resume"], capture_output=True, text=True, cwd=ROOT,
                           timeout=600)  # fmt: skip
    assert again.returncode == 2
    assert again.stderr.splitlines()[-1].startswith(
        f"rlcs train: --resume: the sft run in {run} has trained 2 steps on other data than it "
        f"is given now ({data} changed ("
    )
    assert (run / "metrics.jsonl").read_text() == metrics
    assert (run / "checkpoints" / "step_00000002").is_dir()
