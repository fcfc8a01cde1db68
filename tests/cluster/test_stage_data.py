"""A config's ``data.synthetic`` section, as the driver turns it into a run's data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from cluster.stage_data import data_files, load_stage_data
from rlcs.config import load_config
from rlcs.data import DatasetError

ROOT = Path(__file__).resolve().parents[2]


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


def test_a_missing_chromium_stops_the_synthetic_build_before_it_writes(tmp_path, monkeypatch):
    """With gui among the domains and no Chromium, the build stopped only once it reached the
    GUI domain, leaving the other domains' data and an unfinished build behind."""
    from rlcs.tasks import GENERATORS, gui

    def no_chromium():
        raise gui.ChromiumMissing("no Chromium here (`apt-get install chromium`)")

    drawn = []
    monkeypatch.setattr(gui, "find_chromium", no_chromium)
    for name, cls in GENERATORS.items():
        monkeypatch.setattr(cls, "sample", lambda *a, _name=name: drawn.append(_name))
    cfg = load_config(None, ["model.tiny=vlm", f"run.root={tmp_path}",
                             "data.synthetic.domains=[math, ocr, grounding, gui]"])  # fmt: skip
    cfg.run_dir.mkdir(parents=True)
    with pytest.raises(gui.ChromiumMissing, match="no Chromium here"):
        data_files(cfg, cfg.run_dir)
    assert drawn == []
    assert list(cfg.run_dir.iterdir()) == []


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


def test_rl_items_whose_ground_truth_is_nan_stop_the_load(tmp_path):
    """A NaN answer (JSON's NaN, or its text, as a spreadsheet's empty cell is exported) is a
    missing value: refused at load with the other ground-truth checks."""
    import pytest

    from cluster.stage_data import load_rl_items
    from rlcs.data import DatasetError

    data = tmp_path / "rl.jsonl"
    data.write_text('{"id": "m0", "domain": "math", "prompt": "1+1?", "answer": "2"}\n'
                    '{"id": "m1", "domain": "math", "prompt": "2+2?", "answer": NaN}\n'
                    '{"id": "c1", "domain": "chart", "prompt": "how many?", "answer": "nan"}\n')  # fmt: skip
    with pytest.raises(DatasetError) as err:
        load_rl_items([data])
    assert str(err.value) == (
        f"{data}: item 'm1' has an answer no verifier can score against: ground truth: NaN is a "
        "missing value, not an answer; give the answer, or leave the item out (and 1 more: "
        "['c1'])"
    )


def test_rl_items_with_url_safe_base64_images_load(tmp_path):
    """Bare URL-safe base64 has no '/', so it is one long file name, which the OS refuses
    (ENAMETOOLONG) where it was asked whether such a file exists."""
    import base64
    import io
    import random

    from cluster.stage_data import load_rl_items

    buf = io.BytesIO()
    Image.frombytes("RGB", (24, 24), random.Random(0).randbytes(24 * 24 * 3)).save(buf, "PNG")
    ref = base64.urlsafe_b64encode(buf.getvalue()).decode().rstrip("=")
    assert len(ref) > 255 and "/" not in ref
    data = tmp_path / "rl.jsonl"
    row = {"id": "o1", "domain": "ocr", "prompt": "read", "images": [ref], "answer": "AB"}
    data.write_text(json.dumps(row) + "\n")
    assert [it.images for it in load_rl_items([data])] == [[ref]]


def test_a_run_never_writes_over_what_it_did_not_make(tmp_path):
    """A finished run (even one whose checkpoints were removed) is refused without --resume,
    and data.synthetic refuses a data/ folder of the user's own; an interrupted build of its
    own is redone."""
    import pytest

    from cluster.run_dir import prepare_run_dir

    syn = 'data.synthetic={"domains": ["math"], "sizes": {"rl_train": 2, "heldout": 1, "sft": 1, "pretrain": 1}}'
    cfg = load_config(None, ["model.tiny=text", f"run.root={tmp_path}", "run.name=r", syn])
    run = cfg.run_dir
    (run / "hf").mkdir(parents=True)
    (run / "config.yaml").write_text("stage: rl\n")
    with pytest.raises(FileExistsError, match=r"already holds a run \(config.yaml, hf\)"):
        prepare_run_dir(cfg, resume=False)
    assert sorted(p.name for p in run.iterdir()) == ["config.yaml", "hf"]
    assert prepare_run_dir(cfg, resume=True) == run

    mine = tmp_path / "mine"
    (mine / "data").mkdir(parents=True)
    (mine / "data" / "heldout.jsonl").write_text("my own\n")
    with pytest.raises(FileExistsError, match="holds files that data.synthetic did not write"):
        data_files(cfg, mine)
    assert (mine / "data" / "heldout.jsonl").read_text() == "my own\n"
    (mine / "data" / "building.json").write_text("{}")  # a build of its own, cut short
    train, _ = data_files(cfg, mine)
    assert train[0].is_file() and not (mine / "data" / "building.json").exists()


def test_model_directories_are_checked_before_anything_starts(tmp_path, tiny_text_model):
    from cluster.stage_data import model_dir_problem

    assert model_dir_problem(tiny_text_model) is None
    assert "no config.json" in model_dir_problem(tmp_path)
    (tmp_path / "config.json").write_text('{"foo": 1}')
    assert "no weights" in model_dir_problem(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert "not one transformers can load" in model_dir_problem(tmp_path)


def test_domain_weights_must_name_domains_the_items_have(tmp_path):
    import pytest

    rows = [{"id": f"m{i}", "domain": "math", "prompt": "1+1", "answer": "2"} for i in range(3)]
    data = tmp_path / "rl.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    sets = ["model.tiny=text", f"data.train={json.dumps([str(data)])}", f"run.root={tmp_path}",
            'data.domain_weights={"math": 1, "orc": 1}']  # fmt: skip
    cfg = load_config(None, sets)
    with pytest.raises(ValueError, match=r"names 'orc', which no RL item has .*: math\)"):
        load_stage_data(cfg, cfg.run_dir)


def test_domains_with_items_but_no_weight_are_named_in_a_warning(tmp_path, caplog):
    rows = [{"id": f"{d}{i}", "domain": d, "prompt": "1+1", "answer": "2"}
            for d in ("math", "chart", "vqa") for i in range(2)]  # fmt: skip
    data = tmp_path / "rl.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = ["model.tiny=text", f"data.train={json.dumps([str(data)])}", f"run.root={tmp_path}"]
    cfg = load_config(None, [*base, 'data.domain_weights={"math": 1, "vqa": 0}'])
    with caplog.at_level("WARNING", logger="cluster.stage_data"):
        load_stage_data(cfg, cfg.run_dir)
    assert [r.getMessage() for r in caplog.records] == [
        "data.domain_weights gives no share to chart (2 items), vqa (2 items): the sampler never "
        "draws them; give each a weight to train on it"
    ]
    caplog.clear()
    for weights in ("{}", '{"math": 1, "chart": 1, "vqa": 2}'):  # by item count, or all named
        cfg = load_config(None, [*base, f"data.domain_weights={weights}"])
        with caplog.at_level("WARNING", logger="cluster.stage_data"):
            load_stage_data(cfg, cfg.run_dir)
        assert caplog.records == []


def test_a_held_out_evaluation_without_items_is_named_in_a_warning(tmp_path, caplog):
    rows = [{"id": f"m{i}", "domain": "math", "prompt": "1+1", "answer": "2"} for i in range(2)]
    data = tmp_path / "rl.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = ["model.tiny=text", f"data.train={json.dumps([str(data)])}", f"run.root={tmp_path}"]
    evals = f"data.eval={json.dumps([str(data)])}"
    for sets, warned in ((["run.eval_every=5"], True), (["run.eval_every=0"], False),
                         (["run.eval_every=5", evals], False)):  # fmt: skip
        caplog.clear()
        cfg = load_config(None, [*base, *sets])
        with caplog.at_level("WARNING", logger="cluster.stage_data"):
            got = load_stage_data(cfg, cfg.run_dir)
        assert len(got.eval_items) == (0 if "data.eval" not in str(sets) else 2)
        assert [r.getMessage() for r in caplog.records] == warned * [
            "run.eval_every=5 asks for a held-out evaluation, but data.eval holds no items: the "
            "run makes none; give data.eval files, or set run.eval_every=0"
        ]


def test_a_tiny_models_tokenizer_learns_its_merges_from_the_corpus(tmp_path):
    from transformers import AutoConfig, AutoTokenizer

    from cluster.stage_data import resolve_model
    from rlcs.tokenizer import build_tokenizer

    corpus = tmp_path / "texts.jsonl"
    rows = [{"text": "A page with a Save button at 757,571."},
            {"prompt": "Click the Save button.", "response": "<think>Save button</think>"}]  # fmt: skip
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows * 4))
    sets = ["model.tiny=text", f"run.root={tmp_path}", "run.name=r",
            "model.tokenizer_merges=32", f"model.tokenizer_corpus={json.dumps([str(corpus)])}"]  # fmt: skip
    path = resolve_model(load_config(None, sets), tmp_path / "r")
    tok, plain = AutoTokenizer.from_pretrained(path), build_tokenizer()
    text = "Click the Save button at 757,571."
    assert len(tok(text)["input_ids"]) < len(plain(text)["input_ids"]) / 2
    assert tok.decode(tok(text)["input_ids"]) == text
    assert AutoConfig.from_pretrained(path).vocab_size >= len(tok) > len(plain)

    missing = [*sets[:-1], 'model.tokenizer_corpus=["/nonexistent/texts.jsonl"]']
    with pytest.raises(DatasetError, match="tokenizer_corpus: file not found"):
        resolve_model(load_config(None, [*missing, "run.name=r2"]), tmp_path / "r2")


def test_stage_data_checks_supervised_images_and_rl_tiers_before_the_run(tmp_path):
    """An SFT or pretraining row's images are opened at load, not at the step that draws
    them; an RL item's difficulty tier must be one of the curriculum's."""
    (tmp_path / "img").mkdir()
    Image.new("RGB", (8, 8), "red").save(tmp_path / "img" / "a.png")

    def stage_error(stage, rows, *sets):
        p = tmp_path / f"{stage}.jsonl"
        p.write_text("".join(json.dumps(r) + "\n" for r in rows))
        cfg = load_config(None, ["model.tiny=vlm", f"stage={stage}", f"data.train=[{p}]",
                                 f"run.root={tmp_path}", *sets])  # fmt: skip
        with pytest.raises(DatasetError) as e:
            load_stage_data(cfg, cfg.run_dir)
        return str(e.value).removeprefix(f"{p}:")

    ok = {"prompt": "a", "response": "<think>b</think><answer>c</answer>", "images": ["img/a.png"]}
    assert stage_error("sft", [ok, {**ok, "images": ["img/gone.png"]}]) == (
        f"2: image 'img/gone.png': image not found: {tmp_path / 'img' / 'gone.png'}"
    )
    assert stage_error("pretrain", [{"text": "t", "images": "img/a.png"}]) == (
        "1: images: expected a list of paths or base64 strings, got 'img/a.png'"
    )
    rl = {"id": "a", "domain": "math", "prompt": "1+1", "answer": "2", "difficulty": "hard"}
    assert stage_error("rl", [rl], "curriculum.tier_names=[a, b, c, d, e]") == (
        "1: difficulty: unknown tier 'hard': give a pass rate in [0, 1], or one of a, b, c, d, e"
    )


def test_data_image_check_decides_how_each_stages_images_are_checked(tmp_path):
    """data.image_check reaches SFT, pretraining and RL loads alike: decode catches a PNG cut
    short in its pixels, header does not; both catch a missing file; off checks nothing."""
    import io
    import random

    (tmp_path / "img").mkdir()
    Image.new("RGB", (8, 8), "red").save(tmp_path / "img" / "a.png")
    buf = io.BytesIO()
    Image.frombytes("RGB", (64, 64), random.Random(2).randbytes(64 * 64 * 3)).save(buf, "PNG")
    (tmp_path / "img" / "cut.png").write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    rows = {
        "sft": {"prompt": "a", "response": "<think>b</think><answer>c</answer>"},
        "pretrain": {"text": "<|image|>t"},
        "rl": {"domain": "ocr", "prompt": "read", "answer": "A"},
    }

    def load(stage, image, how):
        p = tmp_path / f"{stage}.jsonl"
        lines = [{"id": f"r{k}", **rows[stage], "images": [ref]}
                 for k, ref in enumerate(["img/a.png", image])]  # fmt: skip
        p.write_text("".join(json.dumps(r) + "\n" for r in lines))
        cfg = load_config(None, ["model.tiny=vlm", f"stage={stage}", f"data.train=[{p}]",
                                 f"run.root={tmp_path}", f"data.image_check={how}"])  # fmt: skip
        try:
            data = load_stage_data(cfg, cfg.run_dir)
        except DatasetError as e:
            return str(e).removeprefix(f"{p}:")
        return len(data.rows or data.items)

    for stage in rows:
        cut = load(stage, "img/cut.png", "decode")
        assert cut.startswith("2: image 'img/cut.png': unreadable image (OSError: "), cut
        assert load(stage, "img/cut.png", "header") == 2
        gone = f"2: image 'img/gone.png': image not found: {tmp_path / 'img' / 'gone.png'}"
        assert load(stage, "img/gone.png", "decode") == gone
        assert load(stage, "img/gone.png", "header") == gone
        assert load(stage, "img/gone.png", "off") == 2
    with pytest.raises(
        Exception, match=r"data\.image_check: Input should be 'decode', 'header' or 'off'"
    ):
        load_config(None, ["model.tiny=vlm", "data.image_check=pixels"])


def test_a_budget_longer_than_a_learner_row_is_named():
    """A rollout at its full thinking and answer budget must fit data.seq_len, or the learner's
    step fails when one comes; the run says so when it starts."""
    from cluster.stage_data import rollout_row_problem

    base = ["model.tiny=text", "rollout.max_think_tokens=100", "rollout.max_answer_tokens=20"]
    assert rollout_row_problem(load_config(None, [*base, "data.seq_len=123"])) is None
    assert rollout_row_problem(load_config(None, [*base, "data.seq_len=122"])) == (
        "data.seq_len=122 cannot hold a rollout at its full budget (122 response tokens: "
        "rollout.max_think_tokens + 2 forced tokens + rollout.max_answer_tokens), let alone its "
        "prompt: one that uses its budget stops the learner's step; raise data.seq_len or lower "
        "the budget"
    )
    nothink = load_config(None, [*base, "data.seq_len=20", "rollout.nothink=true"])
    assert "(20 response tokens: rollout.max_answer_tokens)" in rollout_row_problem(nothink)
    for name in ("tiny-text", "tiny-vlm", "glm4v-9b-8xh100", "glm4v-9b-4node"):
        assert rollout_row_problem(load_config(ROOT / "configs" / f"{name}.yaml")) is None


def test_supervised_rows_the_learner_would_refuse_mid_run_stop_the_load(tmp_path):
    """An SFT response out of the recipe's format, or a pretraining text whose image
    placeholders do not match its images, failed only at the step that drew it (after hours,
    with no file or line); the load names it."""
    (tmp_path / "img").mkdir()
    Image.new("RGB", (8, 8), "red").save(tmp_path / "img" / "a.png")

    def load(stage, rows):
        p = tmp_path / f"{stage}.jsonl"
        p.write_text("".join(json.dumps(r) + "\n" for r in rows))
        cfg = load_config(None, ["model.tiny=vlm", f"stage={stage}", f"data.train=[{p}]",
                                 f"run.root={tmp_path}"])  # fmt: skip
        try:
            return len(load_stage_data(cfg, cfg.run_dir).rows)
        except DatasetError as e:
            return str(e).removeprefix(f"{p}:")

    good = {"prompt": "1+1?", "response": "<think>1+1=2</think><answer>2</answer>"}
    nothink = {"prompt": "1+1?", "response": "<answer>2</answer>", "thinking": False}
    assert load("sft", [good, nothink]) == 2
    assert load("sft", [good, {**good, "response": "the answer is 2"}]) == (
        "2: response: thinking response must be <think>…</think><answer>…</answer> "
        "(got 'the answer is 2')"
    )
    assert load("sft", [good, {**nothink, "thinking": "no"}]) == (
        "2: thinking: expected true or false, got 'no'"
    )
    assert load("sft", [{**nothink, "thinking": True}]).startswith("1: response: thinking ")

    slot = "<|begin_of_image|><|image|><|end_of_image|>"
    assert load("pretrain", [{"text": f"{slot}a red box", "images": ["img/a.png"]}]) == 1
    assert load(
        "pretrain", [{"text": "plain"}, {"text": "a red box", "images": ["img/a.png"]}]
    ) == ("2: text: 0 <|image|> placeholders for 1 images; put one where each image goes")
    assert load("pretrain", [{"text": f"{slot}{slot}two", "images": ["img/a.png"]}]) == (
        "1: text: 2 <|image|> placeholders for 1 images; put one where each image goes"
    )


def test_images_for_a_text_only_model_stop_the_load(tmp_path):
    """Items or rows with images given to a text-only model made its engine fail with a Ray
    traceback once the run (or `rlcs eval`) had started; the load names the item and the model."""
    from cluster.evaluate import images_problem
    from cluster.stage_data import load_rl_items, model_takes_images

    (tmp_path / "img").mkdir()
    Image.new("RGB", (8, 8), "red").save(tmp_path / "img" / "a.png")
    text = {"id": "m0", "domain": "math", "prompt": "1+1?", "answer": "2"}
    pic = {
        "id": "m1",
        "domain": "math",
        "prompt": "the sum?",
        "answer": "2",
        "images": ["img/a.png"],
    }
    rl = tmp_path / "rl.jsonl"
    rl.write_text(json.dumps(text) + "\n" + json.dumps(pic) + "\n")
    only_text = tmp_path / "text.jsonl"
    only_text.write_text(json.dumps(text) + "\n")
    sft = tmp_path / "sft.jsonl"
    sft.write_text(json.dumps({"prompt": "a", "response": "<answer>b</answer>", "thinking": False,
                               "images": ["img/a.png"]}) + "\n")  # fmt: skip

    def cfg(*sets):
        return load_config(None, [f"run.root={tmp_path}", *sets])

    tiny = cfg("model.tiny=text", f"data.train=[{rl}]")
    with pytest.raises(ValueError) as e:
        load_stage_data(tiny, tiny.run_dir)
    assert str(e.value) == (
        f"{rl}: item 'm1' has images, but model.tiny=text is a text-only model (no vision "
        "tower), which cannot read them: give items without images, or train a vision model "
        "(model.tiny=vlm, or a model.path whose config.json has a vision_config)"
    )
    held_out = cfg("model.tiny=text", f"data.train=[{only_text}]", f"data.eval=[{rl}]")
    with pytest.raises(ValueError, match=f"^{rl}: item 'm1' has images"):
        load_stage_data(held_out, held_out.run_dir)
    rows = cfg("model.tiny=text", "stage=sft", f"data.train=[{sft}]")
    with pytest.raises(ValueError, match=f"^{sft}:1: this sft row has images, but model.tiny=text"):
        load_stage_data(rows, rows.run_dir)
    synthetic = cfg("model.tiny=text", "data.synthetic={domains: [math], sizes: {rl_train: 2, "
                    "heldout: 1, sft: 1, pretrain: 1}}")  # fmt: skip
    with pytest.raises(ValueError, match=r"set data.synthetic.text_only=true \(math and OCR"):
        load_stage_data(synthetic, synthetic.run_dir)

    # a vision model takes them; a model.path is judged by its config.json
    vlm = cfg("model.tiny=vlm", f"data.train=[{rl}]")
    assert len(load_stage_data(vlm, vlm.run_dir).items) == 2
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    assert model_takes_images(cfg(f"model.path={model}")) is False
    (model / "config.json").write_text('{"model_type": "glm4v", "vision_config": {}}')
    assert model_takes_images(cfg(f"model.path={model}")) is True
    assert model_takes_images(cfg(f"model.path={tmp_path / 'none'}")) is None

    # rlcs eval and rlcs grade: before any engine starts
    items = load_rl_items([rl])
    (model / "config.json").write_text('{"model_type": "llama"}')
    assert images_problem(model, items) == (
        f"item 'm1' has images, but {model} is a text-only model (no vision tower), which "
        "cannot read them: give it items without images, or a vision model"
    )
    assert images_problem(model, items[:1]) is None
    (model / "config.json").write_text('{"model_type": "glm4v", "vision_config": {}}')
    assert images_problem(model, items) is None
