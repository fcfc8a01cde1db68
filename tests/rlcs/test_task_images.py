"""The generators' images: glyphs in image tokens, the fonts they are drawn in, and GUI pages
whose every element is on the page where its box says."""

import json
import random
import re
from pathlib import Path

import pytest

from rlcs.tasks import generate
from rlcs.tasks.base import TOKEN_PX, draw_cells

CHROMIUM = Path("/usr/bin/chromium")


def test_easy_text_sits_one_glyph_per_image_token():
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


def test_glyphs_are_drawn_in_fonts_matplotlib_ships(monkeypatch):
    """The fonts come with matplotlib, not from the machine's own fonts, so a seed gives the
    same images everywhere; every varied font has every glyph the generators draw (none falls
    back to a missing-glyph box, which would make answers illegible)."""
    import string

    import matplotlib
    from fontTools.ttLib import TTFont

    from rlcs.tasks import base

    shipped = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
    assert base.font_dir() == shipped
    assert all(Path(f).parent == shipped for f in base.font_files())
    assert base.BOLD_FONT in base.VARIED_FONTS
    drawn = set(string.ascii_uppercase + string.digits + "+-*")
    for path in base.font_files():
        cmap = TTFont(path).getBestCmap()
        assert all(ord(c) in cmap for c in drawn), path
    # a missing file says which and how to get it back
    monkeypatch.setattr(base, "font_dir", lambda: Path("/nowhere"))
    with pytest.raises(FileNotFoundError, match="DejaVuSans-Bold.ttf.*reinstall matplotlib"):
        base.font_path(base.BOLD_FONT)


def _ink_centres(img) -> list[float]:
    """The middle x of each run of columns holding ink, left to right."""
    grey = img.convert("L")
    inked = [
        any(grey.getpixel((x, y)) < 128 for y in range(grey.height)) for x in range(grey.width)
    ]
    centres, start = [], None
    for x, ink in enumerate([*inked, False]):
        if ink and start is None:
            start = x
        elif not ink and start is not None:
            centres.append((start + x - 1) / 2)
            start = None
    return centres


def test_a_jittered_line_keeps_its_glyphs_one_cell_apart():
    """From difficulty 0.5 the line is jittered by up to half a cell. Each glyph was kept on the
    canvas on its own, and the canvas was no wider than the line, so a line moved past an edge
    piled its end glyphs onto each other (W9KLLM drawn with its last two letters 7 px apart):
    an answer its image no longer showed. 166 of 200 seeds did so; now the line moves whole."""
    for seed in range(200):
        img = draw_cells("IIIIII", random.Random(seed), 1.0, (112, 56))
        centres = _ink_centres(img)
        assert len(centres) == 6, (seed, centres)
        gaps = [b - a for a, b in zip(centres, centres[1:], strict=False)]
        assert all(abs(g - TOKEN_PX) <= 2 for g in gaps), (seed, centres)
        assert img.width >= 7 * TOKEN_PX  # a spare cell to move in


#: The text of the element (``#e0`` ...) at a page point, for a check that a click hits it.
ELEMENT_AT = "([x, y]) => document.elementFromPoint(x, y).closest('[id]').textContent"


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Chromium")
def test_gui_pages_of_other_sizes_keep_every_element_on_the_page():
    """The layout was fixed for 112 x 112: on a smaller page the lower elements fell off it
    (a target box cut to [531, 999, 999, 999], which no verifier can score, on an element the
    screenshot does not show); a larger page kept them in its top-left corner. The layout now
    follows the size, and a page too small for its elements is a ValueError saying so."""
    from rewards import answer_problem
    from rlcs.tasks.gui import GuiTask

    for size, difficulty in (((160, 90), 1.0), ((224, 224), 1.0), ((112, 112), 1.0),
                             ((112, 112), 0.0), ((168, 84), 0.3)):  # fmt: skip
        task = GuiTask(size=size)
        try:
            for seed in range(6):
                ex = task.sample(random.Random(seed), difficulty)
                assert ex.image.size == size and answer_problem("gui", ex.answer) is None
                # the taught click lands on the target element in the rendered page
                x, y = json.loads(ex.answer_text)["point"]
                hit = task._page.evaluate(ELEMENT_AT, [x / 999 * size[0], y / 999 * size[1]])
                assert ex.prompt.startswith(f"Click the {hit} "), (size, ex.prompt, hit)
                if difficulty >= 0.5:  # the rows spread down the whole page, not its top 112 px
                    ys = [int(y) for y in re.findall(r"at \d+,(\d+)", ex.caption)]
                    assert max(ys) > 600 and min(ys) < 200, (size, ex.caption)
        finally:
            task.close()
    task = GuiTask(size=(64, 64))
    try:
        with pytest.raises(ValueError, match=r"a 64x64 GUI page is too small for 5 elements"):
            task.sample(random.Random(0), 1.0)
        # easy pages put a label's letters a token each: 64 px holds two
        with pytest.raises(ValueError, match=r"a 64x64 GUI page is too small for 2 elements on "
                           r"its 2x2 grid of 28-px image tokens"):  # fmt: skip
            task.sample(random.Random(0), 0.0)
    finally:
        task.close()


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Chromium")
def test_easy_gui_labels_sit_one_glyph_per_image_token():
    """Below difficulty 0.5 a GUI page is a menu laid out on the image-token grid as math and
    OCR text is: each element a row of whole tokens at the left edge, one letter centred in
    each, so that a label is read glyph by glyph (11-px labels straddling tokens at any offset
    were read at chance); the SFT reasoning reads the rows top to bottom, then clicks."""
    from rlcs.tasks.gui import ELEMENT_RECTS, GuiTask

    task = GuiTask()
    try:
        for seed in range(8):
            ex = task.sample(random.Random(seed), 0.3)
            labels = ex.meta["labels"]
            rects = task._page.evaluate(ELEMENT_RECTS, [len(labels)])[0]
            rows = set()
            for label, (x, y, w, h) in zip(labels, rects, strict=True):
                assert x == 0 and y % TOKEN_PX == 0, (label, x, y)
                assert (w, h) == (len(label) * TOKEN_PX, TOKEN_PX), (label, w, h)
                rows.add(y)
                # each letter's ink is centred in its own token, clear of the token's edges
                row = ex.image.crop((x, y, x + w, y + h))
                for i in range(len(label)):
                    cell = row.crop((i * TOKEN_PX, 0, (i + 1) * TOKEN_PX, TOKEN_PX))
                    grey = cell.convert("L")
                    back = grey.getpixel((1, 1))
                    ink = [c for c in range(TOKEN_PX)
                           if any(abs(grey.getpixel((c, r)) - back) > 96 for r in range(TOKEN_PX))]  # fmt: skip
                    assert ink and ink[0] >= 2 and ink[-1] <= TOKEN_PX - 3, (label, i, ink)
                    assert abs((ink[0] + ink[-1]) / 2 - TOKEN_PX / 2) <= 2.5, (label, i, ink)
            assert len(rows) == len(labels)  # a row each
            ys = re.findall(r"at \d+,(\d+)", ex.caption)
            listed = ", ".join(f"{lab} {y}" for lab, y in zip(labels, ys, strict=True))
            target = re.match(r"Click the (\w+) ", ex.prompt)[1]
            point = json.loads(ex.answer_text)["point"]
            assert ex.reasoning == f"{listed}; {target} at {point[0]},{point[1]}"
    finally:
        task.close()


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Chromium")
def test_gui_elements_wider_than_the_layout_allows_are_moved_onto_the_page(monkeypatch):
    """The layout leaves room for the labels in DejaVu Sans Bold; a label rendered wider (a
    wider font, longer labels) ran past the page's right edge, and its box was cut there."""
    from rlcs.tasks import gui

    monkeypatch.setattr(gui, "LABELS", ["Preferences", "Subscriptions", "Notifications",
                                        "Downloads", "Accessibility", "Bookmarks"])  # fmt: skip
    task = gui.GuiTask(size=(112, 112))
    try:
        for seed in range(6):
            ex = task.sample(random.Random(seed), 1.0)
            rects = task._page.evaluate(gui.ELEMENT_RECTS, [len(ex.meta["labels"])])[0]
            assert all(x >= 0 and x + w <= 112 for x, _, w, _ in rects), rects
            x, y = json.loads(ex.answer_text)["point"]
            hit = task._page.evaluate(ELEMENT_AT, [x / 999 * 112, y / 999 * 112])
            assert ex.prompt.startswith(f"Click the {hit} ")
        # on a sheet of pages each is pulled in at its own right edge, not the sheet's
        examples = task.sample_many(random.Random(7), 1.0, 1.0, 9)
        counts = [len(ex.meta["labels"]) for ex in examples]
        for ex, rects in zip(examples, task._page.evaluate(gui.ELEMENT_RECTS, counts), strict=True):
            assert all(x >= 0 and x + w <= 112 for x, _, w, _ in rects), rects
            x, y = json.loads(ex.answer_text)["point"]
            hit = [lab for lab, (rx, ry, w, h) in zip(ex.meta["labels"], rects, strict=True)
                   if rx <= x / 999 * 112 <= rx + w and ry <= y / 999 * 112 <= ry + h]  # fmt: skip
            assert ex.prompt.startswith(f"Click the {hit[0]} ")
    finally:
        task.close()


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Chromium")
@pytest.mark.parametrize("difficulty", [(0.0, 0.3), (0.5, 1.0)])
def test_gui_pages_rendered_a_sheet_at_a_time_are_the_pages_rendered_alone(difficulty):
    """Pages are rendered ``SHEET_PAGES`` to a screenshot (a screenshot of one page cost as
    much as one of 32): every example, pixels and boxes, is the one a page alone gives, so a
    seed's data do not depend on how its stream is cut into sheets."""
    from rlcs.tasks import gui

    task = gui.GuiTask()
    assert task.batch == gui.SHEET_PAGES  # 32 of the demo's 224 x 112 pages to a 896 x 896 sheet
    assert gui.GuiTask(size=(800, 600)).batch == 1  # a sheet no larger than it must be
    n = task.batch + 5  # a full sheet and part of another
    try:
        rng = random.Random("gui:0")  # the stream generate(..., seed=0) draws from
        alone = [task.sample(rng, rng.uniform(*difficulty)) for _ in range(n)]
        streamed = list(generate("gui", n, seed=0, difficulty=difficulty, generator=task))
        together = task.sample_many(random.Random("gui:0"), *difficulty, n)
    finally:
        task.close()
    for drawn in (streamed, together):
        assert len(drawn) == n
        for a, b in zip(alone, drawn, strict=True):
            assert (a.prompt, a.answer, a.reasoning, a.caption, a.meta) == (
                b.prompt, b.answer, b.reasoning, b.caption, b.meta)  # fmt: skip
            assert a.image.size == b.image.size and a.image.tobytes() == b.image.tobytes()
    # the pages differ from each other: the sheet is not one page cropped n times
    assert len({ex.image.tobytes() for ex in together}) > n // 2


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Chromium")
def test_gui_pages_are_drawn_alike_where_no_font_is_installed(tmp_path, monkeypatch):
    """The labels are drawn in the font file matplotlib ships, given to the page, not in a font
    the machine has installed: with the machine's font configuration an empty one (no installed
    font at all), the pages are the same to the pixel, easy menus and harder free layouts
    alike; with the installed fonts named in the page, 3,000 to 8,000 pixels a page differed."""
    from rlcs.tasks.gui import GuiTask

    def pages() -> list:
        task = GuiTask()
        try:
            return [ex for lo, hi in ((0.0, 0.3), (0.5, 1.0))
                    for ex in task.sample_many(random.Random(3), lo, hi, 6)]  # fmt: skip
        finally:
            task.close()

    installed = pages()
    conf = tmp_path / "fonts.conf"  # no font directories: no installed font is found
    conf.write_text(
        f"<?xml version='1.0'?><fontconfig><cachedir>{tmp_path}</cachedir></fontconfig>"
    )
    monkeypatch.setenv("FONTCONFIG_FILE", str(conf))
    bare = pages()
    for a, b in zip(installed, bare, strict=True):
        assert (a.answer, a.caption) == (b.answer, b.caption)
        assert a.image.tobytes() == b.image.tobytes()
