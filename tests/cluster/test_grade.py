"""Offline grading (cluster.grade, `rlcs grade`): items' pass rates under a reference model,
written as the ``difficulty`` the curriculum starts from."""

import argparse
import json
from collections import Counter

import pytest

from cluster.grade import (
    BUCKETS,
    bucket,
    graded_items,
    item_rates,
    pass_rates,
    summary_table,
    tally,
)
from rlcs.config import CurriculumConfig, RolloutConfig
from rlcs.curriculum.tiers import TierScheme
from rlcs.data import Item


def test_buckets_keep_all_and_none_apart_from_the_middle():
    assert [bucket(p) for p in (0.0, 0.125, 0.25, 0.5, 0.75, 0.875, 1.0)] == [
        "0", "(0, .25]", "(0, .25]", "(.25, .5]", "(.5, .75]", "(.75, 1)", "1"
    ]  # fmt: skip


def test_tally_counts_answers_at_the_threshold_and_never_an_error_as_a_pass():
    def rec(item_id, reward, error=None):
        return {"id": item_id, "reward": reward, "error": error}

    records = [
        rec("a", 1.0), rec("a", 0.5),  # exactly the threshold
        rec("a", 0.49), rec("b", 0.0, "format"), rec("b", 0.0, "timeout"),
        rec("b", 1.0, "verifier"),  # an error is never a pass, whatever the reward says
    ]  # fmt: skip
    wins, errors = tally(records, 0.5)
    assert errors == {"format": 1, "timeout": 1, "verifier": 1}
    assert wins == {"a": 2}


def test_unscorable_answers_are_left_out_of_the_pass_rate():
    def rec(item_id, reward, error=None):
        return {"id": item_id, "reward": reward, "error": error}

    records = [
        rec("a", 1.0), rec("a", 0.0, "timeout"), rec("a", 0.0, "parse"), rec("a", 1.0),
        rec("b", 0.0, "crash"), rec("b", 0.0, "timeout"),  # nothing scored
        rec("c", 0.0, "format"), rec("c", 1.0),
    ]  # fmt: skip
    rates, errors = item_rates(records, ["a", "b", "c"], 0.5)
    assert rates == {"a": 2 / 3, "b": None, "c": 0.5}
    assert errors == {"timeout": 2, "parse": 1, "crash": 1, "format": 1}


def test_an_item_without_a_scored_answer_keeps_its_difficulty_and_is_counted_apart(tmp_path):
    items = [Item(id="a", domain="math", prompt="p", difficulty="hard"),
             Item(id="b", domain="math", prompt="p"), Item(id="c", domain="gui", prompt="p")]  # fmt: skip
    got = graded_items(items, {"a": None, "b": 0.25, "c": None}, tmp_path, tmp_path)
    assert [it.difficulty for it in got] == ["hard", 0.25, None]
    table = summary_table(items, {"a": None, "b": 0.25, "c": None}).splitlines()
    assert table[0].split()[-2:] == ["no", "grade"]
    assert table[1].split() == ["gui", "0", "0", "0", "0", "0", "0", "-", "1"]
    assert table[2].split() == ["math", "0", "1", "0", "0", "0", "0", "0.250", "1"]
    assert "no grade" not in summary_table(items, {"a": 1.0, "b": 0.0, "c": 0.5})


def test_graded_items_set_difficulty_and_keep_images_reachable(tmp_path):
    src, out = tmp_path / "data", tmp_path / "graded"
    (src / "images").mkdir(parents=True)
    items = [
        Item(id="a", domain="math", prompt="p", images=["images/a.png"], answer="1",
             difficulty="very_hard", meta={"k": 1}),
        Item(id="b", domain="ocr", prompt="p", images=["data:image/png;base64,xx"]),
    ]  # fmt: skip
    got = graded_items(items, {"a": 1 / 3, "b": 1.0}, src, out)
    assert got[0].difficulty == 0.3333 and got[1].difficulty == 1.0
    assert got[0].meta == {"k": 1} and got[0].answer == "1"
    # with the curriculum's tiers, a human tier label is merged with the model's pass rate:
    # very_hard stands for 0.05 under the default cut points, the model passed a third
    tiers = TierScheme.from_config(CurriculumConfig())
    merged = graded_items(items, {"a": 1 / 3, "b": 1.0}, src, out, tiers)
    assert merged[0].difficulty == round((0.05 + 1 / 3) / 2, 4) and merged[1].difficulty == 1.0
    assert merged[0].meta == {"k": 1, "human_tier": "very_hard", "model_pass_rate": 0.3333}
    # from the output's folder the relative path still names the same file; inline images stay
    assert (out / got[0].images[0]).resolve() == (src / "images" / "a.png").resolve()
    assert got[1].images == items[1].images
    assert items[0].difficulty == "very_hard"  # the input items are not modified
    assert graded_items(items, {"a": 0.5, "b": 0.5}, src, src)[0].images == ["images/a.png"]
    with pytest.raises(ValueError, match="1 items have no grade"):
        graded_items(items, {"a": 0.5}, src, out)


def test_summary_table_counts_items_per_bucket_and_the_domain_mean():
    items = [Item(id=str(i), domain=d, prompt="p") for i, d in enumerate(["math"] * 3 + ["gui"])]
    table = summary_table(items, {"0": 0.0, "1": 0.5, "2": 1.0, "3": 0.25}).splitlines()
    assert table[0].split()[0] == "domain" and len(table) == 3
    gui, math = table[1].split(), table[2].split()
    assert gui[0] == "gui" and gui[1:] == ["0", "1", "0", "0", "0", "0", "0.250"]
    assert math[0] == "math" and math[1:] == ["1", "0", "1", "0", "0", "1", "0.500"]
    assert len(BUCKETS) == 6


@pytest.fixture(scope="module")
def ray_two_cpus():
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def task_files(tmp_path):
    from rlcs.tasks import build_task_data

    sizes = {"rl_train": 3, "heldout": 1, "sft": 1, "pretrain": 1}
    return build_task_data(tmp_path / "data", sizes=sizes, domains=("math", "grounding"),
                           difficulty=(0.0, 0.3), progress=False)  # fmt: skip


def test_pass_rates_are_the_scored_share_of_the_models_own_samples(
    ray_two_cpus, tiny_vlm, task_files
):
    import rewards
    from actors.rollout.worker import RolloutWorkerImpl
    from cluster.stage_data import absolute_images
    from rlcs.data import load_items

    path = task_files["rl_train"]
    items = [absolute_images(it, path.parent) for it in load_items(path)]
    rollout = RolloutConfig(engine="hf", max_think_tokens=8, max_answer_tokens=8, temperature=1.0)
    rates, errors = pass_rates(tiny_vlm, items, rollout, 3, num_cpus=1, progress=False)

    # the same samples drawn in this process (same seeds: step 0, one batch), same verifiers
    trajs = RolloutWorkerImpl(str(tiny_vlm), rollout.model_dump()).generate(
        items, n=3, step=0, temperature=1.0
    )
    by_id = {it.id: it for it in items}
    scored = rewards.score_batch(
        [{"domain": by_id[t.item_id].domain, "response": t.response,
          "answer": by_id[t.item_id].answer} for t in trajs]
    )  # fmt: skip
    wins = Counter(t.item_id for t, r in zip(trajs, scored, strict=True) if r.reward >= 0.5)
    assert rates == {it.id: wins[it.id] / 3 for it in items}
    assert errors == Counter(r.error for r in scored if r.error is not None)
    with pytest.raises(ValueError, match="temperature must be above 0"):
        pass_rates(tiny_vlm, items, rollout.model_copy(update={"temperature": 0.0}), 3)


def test_rlcs_grade_writes_difficulties_the_curriculum_starts_from(
    ray_two_cpus, tiny_vlm, task_files, tmp_path, capsys
):
    from cluster.grade import main
    from rlcs.curriculum import curriculum_from_items
    from rlcs.data import load_items

    out = tmp_path / "graded" / "rl.jsonl"
    args = argparse.Namespace(
        model=str(tiny_vlm), data=[str(task_files["rl_train"])], out=str(out), config=None,
        samples=2, cpus=1.0, workers=1, overwrite=False,
        overrides=["rollout.max_think_tokens=8", "rollout.max_answer_tokens=8"],
    )  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    result = json.loads(printed.splitlines()[-1].removeprefix("RESULT "))
    assert result["items"] == 6 and result["answers"] == 12 and result["out"] == str(out)
    # the untrained model's answers are malformed: wrong answers, not unscorable ones
    assert sum(result["errors"].values()) > 0 and result["unscorable"] == 0
    graded = load_items(out)  # images still load from the new folder
    assert [it.id for it in graded] == [it.id for it in load_items(task_files["rl_train"])]
    assert all(it.difficulty in (0.0, 0.5, 1.0) for it in graded)
    cur = curriculum_from_items(graded)
    assert cur.pass_rate().tolist() == pytest.approx([it.difficulty for it in graded])

    # bad input: a clear message and exit code 2, nothing written
    args.out = str(task_files["rl_train"])
    assert main(args) == 2
    assert "is one of the inputs" in capsys.readouterr().err
    args.out, args.model = str(tmp_path / "x.jsonl"), str(tmp_path)
    assert main(args) == 2
    assert "not a Hugging Face model directory" in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists()
    # an item whose ground truth no verifier can score against stops it before any worker
    bad = task_files["rl_train"].with_name("bad.jsonl")  # beside the images it names
    rows = [json.loads(line) for line in task_files["rl_train"].read_text().splitlines()]
    grounding = next(r for r in rows if r["domain"] == "grounding")
    grounding["answer"] = [[1, 2, 3]]
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args.data, args.model = [str(bad)], str(tiny_vlm)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"item {grounding['id']!r} has an answer no verifier can score against" in err
    assert "a box is [x1, y1, x2, y2], got [1, 2, 3]" in err
    assert not (tmp_path / "x.jsonl").exists()


def test_an_interrupted_grading_goes_on_where_it_stopped(
    ray_two_cpus, tiny_vlm, task_files, tmp_path, capsys
):
    """What was graded is kept in OUT.partial as batches come back: run again, the grading
    answers only the items it had not graded, and takes the kept ones as they were. A partial
    file from a grading with other settings is set aside, not used."""
    from cluster.demo import DEFAULT_CONFIG
    from cluster.grade import grade_settings, main
    from cluster.grade_progress import GradeProgress
    from rlcs.config import load_config
    from rlcs.data import load_items

    inputs = [task_files["rl_train"]]
    overrides = ["rollout.max_think_tokens=8", "rollout.max_answer_tokens=8"]
    cfg = load_config(DEFAULT_CONFIG, overrides)
    out = tmp_path / "graded.jsonl"
    ids = [it.id for it in load_items(inputs[0])]
    # an earlier run of the same command graded three items before it was stopped
    kept = GradeProgress(out, grade_settings(cfg, tiny_vlm, inputs, 2, len(ids)))
    kept.add([{"id": i, "reward": 1.0 if i == ids[0] else 0.0, "error": None} for i in ids[:3]
              for _ in range(2)])  # fmt: skip
    with kept.path.open("a") as f:
        f.write('{"id": "cut sh')  # the line the interruption cut short
    args = argparse.Namespace(model=str(tiny_vlm), data=[str(p) for p in inputs], out=str(out),
                              config=None, samples=2, cpus=1.0, workers=1, overwrite=False,
                              overrides=overrides)  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert f"continuing the grading kept in {kept.path}: 3 of 6 items graded already" in printed
    graded = {it.id: it.difficulty for it in load_items(out)}
    assert [graded[i] for i in ids[:3]] == [1.0, 0.0, 0.0]  # as kept, not answered again
    assert all(graded[i] in (0.0, 0.5, 1.0) for i in ids[3:])
    assert not kept.path.exists()

    # the graded file is not replaced without --overwrite
    before = out.read_text()
    assert main(args) == 2
    assert "graded.jsonl exists; give another file, or --overwrite" in capsys.readouterr().err
    assert out.read_text() == before

    # kept progress from another grading (other samples) is set aside and everything graded
    other = GradeProgress(out, grade_settings(cfg, tiny_vlm, inputs, 4, len(ids)))
    other.add([{"id": ids[0], "reward": 1.0, "error": None}])
    args.overwrite = True
    assert main(args) == 0
    assert "continuing" not in capsys.readouterr().out
    assert kept.path.with_name(kept.path.name + ".stale").is_file()
    assert not kept.path.exists()


def test_a_kept_grading_is_continued_only_under_the_same_multiple_choice_setting(tmp_path):
    """Items with choices are answered differently as fill-in and by letter: grades kept under
    one must not be mixed with the other's."""
    from cluster.grade import grade_settings
    from rlcs.config import load_config

    def settings(*sets):
        return grade_settings(load_config(None, ["model.tiny=text", *sets]), tmp_path, [], 4, 8)

    assert settings()["multiple_choice"] == "fill_in"
    assert settings() != settings("data.multiple_choice=letter")
    assert settings() == settings("data.multiple_choice=fill_in")


@pytest.mark.parametrize("torn", ['{"id": "cut sh', "whole record, newline lost"])
def test_a_resumed_grading_appends_after_a_last_line_the_interruption_tore(tmp_path, torn):
    """An interruption can leave the kept file's last line without its newline: cut short
    mid-record, or whole with only the newline missing. The next batch must not be written
    onto it: the item graded first after resuming would be lost (and graded a third time),
    and a whole record kept."""
    from cluster.grade_progress import GradeProgress

    out = tmp_path / "graded.jsonl"
    settings = {"threshold": 0.5, "samples": 2}

    def answers(ids, reward=1.0):
        return [{"id": i, "reward": reward, "error": None} for i in ids for _ in range(2)]

    first = GradeProgress(out, settings)
    first.add(answers(["a", "b"]))
    with first.path.open("a", encoding="utf-8") as f:
        if torn.startswith("{"):
            f.write(torn)
        else:  # a whole record for "c", its newline never written
            f.write(json.dumps({"id": "c", "passed": 1, "scored": 2, "errors": {}}))
    kept = {"a", "b"} | ({"c"} if not torn.startswith("{") else set())

    resumed = GradeProgress(out, settings)
    assert set(resumed.done) == kept
    resumed.add(answers(["d"], reward=0.0))
    resumed.add(answers(["e"]))

    again = GradeProgress(out, settings)
    assert set(again.done) == kept | {"d", "e"}
    rates, _ = again.rates(sorted(kept | {"d", "e"}))
    assert rates["d"] == 0.0 and rates["e"] == 1.0
    lines = again.path.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0]) == settings
    assert [json.loads(line)["id"] for line in lines[1:]] == sorted(kept | {"d", "e"})


def test_a_kept_file_whose_settings_line_lost_its_newline_is_continued(tmp_path):
    """Interrupted right after the settings line was written, before its newline: the next
    run continues that file, and its first batch does not turn the settings line into one
    that no longer reads (which would set the whole file aside)."""
    from cluster.grade_progress import GradeProgress

    out = tmp_path / "graded.jsonl"
    settings = {"threshold": 0.5, "samples": 2}
    partial = out.with_name(out.name + ".partial")
    partial.write_text(json.dumps(settings), encoding="utf-8")
    resumed = GradeProgress(out, settings)
    resumed.add([{"id": "a", "reward": 1.0, "error": None}])
    again = GradeProgress(out, settings)
    assert set(again.done) == {"a"}
    assert not partial.with_name(partial.name + ".stale").exists()
