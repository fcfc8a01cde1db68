import io
import json
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


def test_easy_text_sits_one_glyph_per_image_token():
    from rlcs.tasks.base import TOKEN_PX

    for domain, key in (("math", "expression"), ("ocr", None)):
        for ex in generate(domain, 10, seed=1, difficulty=(0.0, 0.3)):
            text = (ex.meta[key] if key else ex.answer_text).replace(" ", "")
            assert ex.image.size == (len(text) * TOKEN_PX, TOKEN_PX)
            # every cell has ink, and its border columns are blank: no glyph straddles tokens
            for i in range(len(text)):
                cell = ex.image.crop((i * TOKEN_PX, 0, (i + 1) * TOKEN_PX, TOKEN_PX)).convert("L")
                assert cell.getextrema()[0] < 128
                edge = [cell.getpixel((x, y)) for x in (0, TOKEN_PX - 1) for y in range(TOKEN_PX)]
                assert min(edge) > 200
        hard = next(iter(generate(domain, 1, seed=1, difficulty=(0.9, 0.9)))).image
        assert hard.height > TOKEN_PX


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
