import io
import json
import re
from pathlib import Path

import pytest

from rlcs.data import load_items
from rlcs.tasks import GENERATORS, build_task_data, generate

CHROMIUM = Path("/usr/bin/chromium")
DOMAINS = [d for d in GENERATORS if d != "gui" or CHROMIUM.exists()]


def png(img) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


@pytest.mark.parametrize("domain", DOMAINS)
def test_same_seed_same_examples(domain):
    a = list(generate(domain, 3, seed=5))
    b = list(generate(domain, 3, seed=5))
    c = list(generate(domain, 3, seed=6))
    assert [(x.prompt, x.answer) for x in a] == [(x.prompt, x.answer) for x in b]
    assert [png(x.image) for x in a] == [png(x.image) for x in b]
    assert [png(x.image) for x in a] != [png(x.image) for x in c]


@pytest.mark.parametrize("domain", DOMAINS)
def test_a_shared_generator_gives_the_same_examples_and_stays_open(domain):
    """build_task_data draws every split of a domain from one generator (one browser for GUI;
    a thread holds one at a time, as Playwright's sync API allows)."""

    def key(examples):
        return [(x.prompt, x.answer, png(x.image)) for x in examples]

    alone = [key(generate(domain, 3, seed=seed)) for seed in (5, 6)]
    gen = GENERATORS[domain]()
    try:
        shared = [key(generate(domain, 3, seed=seed, generator=gen)) for seed in (5, 6)]
        assert shared == alone
        if domain == "gui":
            assert gen._browser is not None and gen._browser.is_connected()
    finally:
        gen.close()


@pytest.mark.parametrize("domain", DOMAINS)
def test_sft_targets_earn_full_reward_from_the_verifiers(domain):
    import rewards

    for ex in generate(domain, 6, seed=1):
        result = rewards.score(domain, ex.response(), ex.answer)
        assert result.reward == 1.0, (ex.response(), ex.answer, result)


def test_difficulty_knob_changes_the_task():
    easy = [ex.meta["expression"] for ex in generate("math", 20, seed=0, difficulty=(0.0, 0.0))]
    hard = [ex.meta["expression"] for ex in generate("math", 20, seed=0, difficulty=(1.0, 1.0))]
    assert all("+" in e and max(map(int, e.split(" + "))) <= 9 for e in easy)
    assert any("*" in e or "-" in e for e in hard)


def test_bad_arguments_are_reported():
    with pytest.raises(ValueError, match="unknown task domain 'poetry'"):
        list(generate("poetry", 1, seed=0))
    with pytest.raises(ValueError, match="difficulty range"):
        list(generate("math", 1, seed=0, difficulty=(0.8, 0.2)))


def test_build_task_data_writes_loadable_splits(tmp_path):
    sizes = {"rl_train": 3, "heldout": 2, "sft": 2, "pretrain": 2}
    paths = build_task_data(tmp_path, sizes=sizes, domains=tuple(DOMAINS), progress=False)
    items = load_items([paths["rl_train"], paths["heldout"]])
    assert len(items) == 5 * len(DOMAINS)
    assert {i.domain for i in items} == set(DOMAINS)
    # every item names its subcategory, for the curriculum's subcategory rates
    assert all(isinstance(i.meta.get("subcategory"), str) for i in items)
    sft = [json.loads(line) for line in paths["sft"].read_text().splitlines()]
    assert all(
        r["response"].startswith("<think>") and r["response"].count("<|begin_of_box|>") == 1
        for r in sft
    )
    pre = [json.loads(line) for line in paths["pretrain"].read_text().splitlines()]
    assert all(r["text"] and (tmp_path / r["images"][0]).is_file() for r in pre)


def test_text_only_data_for_text_models(tmp_path):
    sizes = {"rl_train": 2, "heldout": 1, "sft": 1, "pretrain": 1}
    paths = build_task_data(
        tmp_path, sizes=sizes, domains=("math", "ocr"), text_only=True, progress=False
    )
    items = load_items(paths["rl_train"])
    assert all(not i.images for i in items)
    math_item = next(i for i in items if i.domain == "math")
    assert math_item.meta["expression"] in math_item.prompt
    assert not (tmp_path / "images").exists() or not any((tmp_path / "images").iterdir())
    with pytest.raises(ValueError, match="text_only data can only be built for math, ocr"):
        build_task_data(
            tmp_path, sizes=sizes, domains=("grounding",), text_only=True, progress=False
        )


def test_ocr_turns_words_into_codes_gradually():
    import random

    from rlcs.tasks.ocr import OcrTask

    task = OcrTask()

    def code_share(difficulty: float) -> float:
        rng = random.Random(3)
        kinds = [task.sample(rng, difficulty).meta["subcategory"] for _ in range(200)]
        return kinds.count("code") / len(kinds)

    shares = [code_share(d) for d in (0.2, 0.3, 0.375, 0.45, 0.525, 0.6, 0.9)]
    assert shares[:2] == [0.0, 0.0] and shares[-2:] == [1.0, 1.0]
    assert 0.1 < shares[2] < shares[3] < shares[4] < 0.9, shares
    # the word-only range draws as it did before the mix: the demo's data is unchanged
    rng = random.Random(7)
    assert [task.sample(rng, d).answer for d in (0.0, 0.1, 0.25, 0.3)] == [
        "KEY", "NET", "SUN", "NET"
    ]  # fmt: skip
    assert rng.random() == 0.5771029486174987


def test_a_difficulty_range_per_domain(tmp_path):
    sizes = {"rl_train": 6, "heldout": 2, "sft": 2, "pretrain": 2}
    ranges = {"math": (0.0, 0.2), "ocr": (0.6, 0.8)}
    paths = build_task_data(
        tmp_path, sizes=sizes, domains=("math", "ocr"), difficulty=ranges, progress=False
    )
    items = load_items([paths["rl_train"], paths["heldout"]])
    for item in items:
        lo, hi = ranges[item.domain]
        assert lo <= item.meta["difficulty"] <= hi
    # OCR's knob from 0.6 writes codes only
    assert {i.meta["subcategory"] for i in items if i.domain == "ocr"} == {"code"}
    # a domain left out of the mapping is an error, not a silent default
    with pytest.raises(ValueError, match="no difficulty range for ocr"):
        build_task_data(tmp_path, sizes=sizes, domains=("math", "ocr"),
                        difficulty={"math": (0.0, 0.2)}, progress=False)  # fmt: skip


def _no_chromium_installed(monkeypatch, tmp_path):
    """A machine with no Chromium anywhere: Debian's path, the PATH, Playwright's folder."""
    from rlcs.tasks import gui

    monkeypatch.delenv(gui.CHROMIUM_ENV, raising=False)
    monkeypatch.setattr(gui, "CHROMIUM", str(tmp_path / "usr-bin-chromium"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setattr(gui, "_playwrights_chromium", lambda: None)
    return gui


def test_chromium_is_found_by_the_variable_then_debians_then_the_path(monkeypatch, tmp_path):
    gui = _no_chromium_installed(monkeypatch, tmp_path)
    with pytest.raises(gui.ChromiumMissing) as e:
        gui.find_chromium()
    for how in ("apt-get install chromium", "playwright install chromium", "RLCS_CHROMIUM",
                "leave gui out of data.synthetic.domains"):  # fmt: skip
        assert how in str(e.value)
    # Ubuntu's and Fedora's name on the PATH
    bin_dir = tmp_path / "empty-bin"
    bin_dir.mkdir()
    on_path = bin_dir / "chromium-browser"
    on_path.write_text("#!/bin/sh\n")
    on_path.chmod(0o755)
    assert gui.find_chromium() == str(on_path)
    # Debian's comes first
    debian = Path(gui.CHROMIUM)
    debian.write_text("#!/bin/sh\n")
    debian.chmod(0o755)
    assert gui.find_chromium() == str(debian)
    # the variable before either; one that names no executable is an error, not a fallback
    monkeypatch.setenv(gui.CHROMIUM_ENV, str(on_path))
    assert gui.find_chromium() == str(on_path)
    on_path.chmod(0o644)
    with pytest.raises(gui.ChromiumMissing, match=r"\$RLCS_CHROMIUM=.*is not an executable file"):
        gui.find_chromium()


def test_gui_data_without_chromium_stops_with_how_to_get_it(monkeypatch, tmp_path):
    gui = _no_chromium_installed(monkeypatch, tmp_path)
    with pytest.raises(gui.ChromiumMissing, match="none was found"):
        build_task_data(tmp_path / "data", sizes={"rl_train": 2}, domains=("gui",), seed=0)


def test_a_missing_chromium_stops_the_build_before_any_domain_is_generated(monkeypatch, tmp_path):
    """The GUI domain's browser was looked for only when the build reached that domain, after
    every domain before it had been generated; it is looked for before anything is written."""
    from rlcs.tasks import gui

    def no_chromium():
        raise gui.ChromiumMissing("no Chromium here (`apt-get install chromium`)")

    drawn = []
    monkeypatch.setattr(gui, "find_chromium", no_chromium)
    for name, cls in GENERATORS.items():  # a sample of any domain would be generation begun
        monkeypatch.setattr(cls, "sample", lambda *a, _name=name: drawn.append(_name))
    out = tmp_path / "data"
    with pytest.raises(gui.ChromiumMissing, match="no Chromium here"):
        build_task_data(out, sizes={"rl_train": 2, "heldout": 1, "sft": 1, "pretrain": 1},
                        domains=("math", "ocr", "grounding", "gui"), progress=False)  # fmt: skip
    assert drawn == []
    assert not out.exists()


def test_unknown_domains_and_splits_are_named_with_the_valid_ones(tmp_path):
    """An unknown domain was a bare KeyError once the build reached it; an unknown key of
    ``sizes`` (a misspelt split) was ignored, and that split got its default size."""
    sizes = {"rl_train": 1, "heldout": 1, "sft": 1, "pretrain": 1}
    out = tmp_path / "data"
    with pytest.raises(ValueError) as e:
        build_task_data(out, sizes=sizes, domains=("math", "chart"), progress=False)
    assert str(e.value) == (
        "unknown task domain 'chart' in domains; the domains: math, ocr, grounding, gui"
    )
    with pytest.raises(ValueError) as e:
        build_task_data(out, sizes={**sizes, "train": 5}, domains=("math",), progress=False)
    assert str(e.value) == (
        "unknown split 'train' in sizes; the splits: rl_train, heldout, sft, pretrain"
    )
    # an unknown domain is named as such, not as one text_only cannot build
    with pytest.raises(ValueError, match="unknown task domain 'chart'"):
        build_task_data(out, sizes=sizes, domains=("chart",), text_only=True, progress=False)
    assert not out.exists()


@pytest.mark.parametrize("domain", DOMAINS)
def test_sft_targets_score_one_and_wrong_answers_less_at_every_difficulty(domain):
    """The ground truth, written as SFT teaches, earns 1.0 from the real verifier at the easy
    and the hard end of the knob; an answer off by one (a number, a letter, a box moved by its
    width, a click on another element) earns less."""
    import rewards

    for d in (0.0, 0.3, 0.6, 1.0):
        for ex in generate(domain, 4, seed=11, difficulty=(d, d)):
            assert rewards.score(domain, ex.response(), ex.answer).reward == 1.0, (d, ex.answer)
            wrong = _a_wrong_answer(ex)
            response = ex.response().replace(ex.answer_text, wrong)
            assert rewards.score(domain, response, ex.answer).reward < 1.0, (d, wrong, ex.answer)


def _a_wrong_answer(ex) -> str:
    if ex.domain == "math":
        return str(int(ex.answer) + 1)
    if ex.domain == "ocr":
        return ex.answer[:-1] + ("A" if ex.answer[-1] != "A" else "B")
    if ex.domain == "grounding":
        x1, y1, x2, y2 = ex.answer[0]
        w = x2 - x1
        box = [x1 + w, y1, x2 + w, y2] if x2 + w <= 999 else [x1 - w, y1, x1, y2]
        return json.dumps(box, separators=(",", ":"))
    target = json.loads(ex.answer_text)["point"]
    other = next(
        [int(x), int(y)]
        for x, y in re.findall(r"at (\d+),(\d+)", ex.caption)
        if [int(x), int(y)] != target
    )
    return json.dumps({"action": "click", "point": other}, separators=(",", ":"))


def test_generate_checks_its_arguments_when_called():
    """A bad range was raised only when the first example was drawn, far from the call that
    passed it; and a generator of another domain drew that domain's tasks under this name."""
    from rlcs.tasks.ocr import OcrTask

    for bad in ((0.8, 0.2), (0.0, 1.5), (0.0, float("nan")), 0.3, (0.1, 0.2, 0.3), ("0", "1")):
        with pytest.raises(ValueError, match=r"difficulty range must be \[lo, hi\] with 0 <= lo"):
            generate("math", 1, seed=0, difficulty=bad)
    with pytest.raises(
        ValueError, match="generator is a 'ocr' generator, and the domain is 'math'"
    ):
        generate("math", 1, seed=0, generator=OcrTask())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"difficulty": {"math": (0.0, 0.3), "ocr": (0.5, 2.0)}},
         r"difficulty range of ocr must be \[lo, hi\] with 0 <= lo <= hi <= 1, got \(0\.5, 2\.0\)"),
        ({"difficulty": 0.3}, r"difficulty range must be \[lo, hi\] .* got 0\.3"),
        ({"difficulty": (0.0, 0.3, 0.6)}, r"difficulty range must be \[lo, hi\]"),
        ({"sizes": {"rl_train": 2, "heldout": -1}},
         r"sizes\['heldout'\] must be a whole number of at least 0, got -1"),
        ({"sizes": {"rl_train": 2.5}}, r"sizes\['rl_train'\] must be a whole number"),
    ],
)  # fmt: skip
def test_a_bad_range_or_size_stops_the_build_before_anything_is_written(
    tmp_path, monkeypatch, change, message
):
    """A bad range was found when its domain's generation began: after the split files had
    been opened (a previous build's data emptied) and the domains before it written; a
    negative size wrote an empty split, and a fractional one failed part-way."""
    out = tmp_path / "data"
    sizes = {"rl_train": 2, "heldout": 1, "sft": 1, "pretrain": 1}
    build_task_data(out, sizes=sizes, domains=("math", "ocr"), progress=False)
    before = {p.name: p.read_bytes() for p in out.glob("*.jsonl")}
    drawn = []
    for cls in GENERATORS.values():
        monkeypatch.setattr(cls, "sample", lambda *a: drawn.append(a))
    args = {"sizes": sizes, "domains": ("math", "ocr"), "progress": False, **change}
    with pytest.raises(ValueError, match=message):
        build_task_data(out, **args)
    assert drawn == []
    assert {p.name: p.read_bytes() for p in out.glob("*.jsonl")} == before


def test_codes_leave_out_the_characters_that_read_alike():
    """O and 0 (in the monospaced fonts), I and 1 (in the serif ones) cannot be told apart
    among a code's random characters at 18-24 px with noise; a code's ground truth must be
    legible. Words keep their letters, and the demo's word range draws as before."""
    import random

    from rlcs.tasks.ocr import AMBIGUOUS, CODE_CHARS, WORDS, OcrTask

    assert set(AMBIGUOUS) == set("O0I1") and not set(AMBIGUOUS) & set(CODE_CHARS)
    assert len(CODE_CHARS) == 32
    task, rng = OcrTask(), random.Random(0)
    codes = [task.sample(rng, rng.uniform(0.6, 1.0)).answer for _ in range(300)]
    assert len(set("".join(codes))) == 32 and not set("".join(codes)) & set(AMBIGUOUS)
    words = [ex.answer for ex in generate("ocr", 50, seed=0, difficulty=(0.0, 0.3))]
    assert set(words) <= set(WORDS) and any("O" in w or "I" in w for w in words)


def _tasks(path: Path) -> list[str]:
    """Each row's task as ``Example.task`` names it: the math expression in its meta, else
    the prompt with the answer (a pretraining row: its caption, which names the task)."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [
        str(r.get("meta", {}).get("expression") or f"{r.get('prompt')}\n{r.get('answer')}")
        for r in rows
        if "text" not in r
    ]


def test_a_held_out_split_kept_apart_shares_no_task_with_training(tmp_path):
    """By default the easy range's held-out tasks nearly all occur in training too (and a math
    image is the task's own, so often the very image); with heldout=apart none does."""
    sizes = {"rl_train": 40, "heldout": 12, "sft": 20, "pretrain": 20}
    kw = {"sizes": sizes, "domains": ("math", "ocr"), "difficulty": (0.0, 0.3), "progress": False}
    drawn = build_task_data(tmp_path / "drawn", **kw)
    apart = build_task_data(tmp_path / "apart", heldout="apart", **kw)
    trained = set(_tasks(drawn["rl_train"])) | set(_tasks(drawn["sft"]))
    shared = [t for t in _tasks(drawn["heldout"]) if t in trained]
    assert len(shared) > len(_tasks(drawn["heldout"])) // 2  # what "apart" is for
    held = _tasks(apart["heldout"])
    trained = set(_tasks(apart["rl_train"])) | set(_tasks(apart["sft"]))
    assert len(held) == 24 and not set(held) & trained
    captions = apart["pretrain"].read_text()  # the captions name no held-out expression
    math_held = {t for t in held if "\n" not in t}
    assert math_held and not [e for e in math_held if f"expression {e}," in captions]
    # the same tasks on every build: a hash of the task, not a draw
    again = build_task_data(tmp_path / "again", heldout="apart", **kw)
    assert again["heldout"].read_text() == apart["heldout"].read_text()


def test_a_held_out_share_too_small_to_draw_from_is_refused(tmp_path, monkeypatch):
    import rlcs.tasks as tasks

    monkeypatch.setattr(tasks, "held_apart", lambda ex: False)  # no task is held out
    with pytest.raises(ValueError, match=r"math: 0 of 2 held-out examples in 501 draws at "
                       r"difficulty \[0, 0\.3\].*heldout=drawn"):  # fmt: skip
        build_task_data(tmp_path, sizes={"heldout": 2}, domains=("math",),
                        difficulty=(0.0, 0.3), heldout="apart", progress=False)  # fmt: skip
    with pytest.raises(ValueError, match="heldout must be one of drawn, apart, got 'kept'"):
        build_task_data(tmp_path, heldout="kept", progress=False)


def test_a_rebuild_removes_the_images_no_split_refers_to(tmp_path):
    """Built again into the same folder with fewer items (or as text only), the images of the
    earlier build that no split names any more go; a file of the user's own stays."""
    out = tmp_path / "data"
    kw = {"domains": ("math", "ocr"), "difficulty": (0.0, 0.3), "progress": False}
    build_task_data(out, sizes={"rl_train": 3, "heldout": 2, "sft": 2, "pretrain": 1}, **kw)
    (out / "images" / "mine.png").write_bytes(b"not ours")
    (out / "images" / "math-rl_train-00002.png.bak").write_bytes(b"not ours either")
    build_task_data(out, sizes={"rl_train": 1, "heldout": 1, "sft": 0, "pretrain": 1}, **kw)
    referred = {
        Path(image).name
        for split in ("rl_train", "heldout", "sft", "pretrain")
        for line in (out / f"{split}.jsonl").read_text().splitlines()
        for image in json.loads(line)["images"]
    }
    left = {p.name for p in (out / "images").iterdir()}
    assert left == referred | {"mine.png", "math-rl_train-00002.png.bak"}
    assert len(referred) == 6  # 3 rows a domain, two domains
    build_task_data(out, sizes={"rl_train": 1, "heldout": 1, "sft": 1, "pretrain": 1},
                    text_only=True, **kw)  # fmt: skip
    assert {p.name for p in (out / "images").iterdir()} == {
        "mine.png",
        "math-rl_train-00002.png.bak",
    }
