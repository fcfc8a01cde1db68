"""Small web pages rendered in Chromium by Playwright; element boxes come from the real DOM.

The answer is an action in the platform's GUI format (see docs/rewards.md): the ground truth
names the target element's box, and a correct model clicks a point inside it.
"""

from __future__ import annotations

import base64
import html
import io
import itertools
import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import NamedTuple

from PIL import Image

from rlcs.tasks.base import (
    BOLD_FONT,
    TOKEN_PX,
    Example,
    TaskGenerator,
    font_dir,
    font_path,
    to_norm_box,
)

#: Debian's Chromium, which `make install` installs; looked for first after $RLCS_CHROMIUM.
CHROMIUM = "/usr/bin/chromium"
#: An environment variable naming the Chromium (or Chrome) binary to use instead.
CHROMIUM_ENV = "RLCS_CHROMIUM"
#: Other names a Chromium or Chrome goes by on the PATH (Ubuntu, Fedora, Google's packages).
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
#: Headless flags for a closed network: no background fetches, no updates, no sync.
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
LABELS = ["OK", "Save", "Back", "Next", "Send", "Help", "Menu", "Exit", "Undo", "Open"]
COLORS = ["#1565c0", "#2e7d32", "#c62828", "#6a1b9a", "#ef6c00", "#37474f"]


class ChromiumMissing(ValueError):
    """No Chromium to render the GUI task's pages in; the message says how to get one."""


def find_chromium() -> str:
    """The Chromium to launch: ``$RLCS_CHROMIUM``; else Debian's; else the first of
    ``CHROMIUM_NAMES`` on the PATH; else the one Playwright downloaded
    (``playwright install chromium``). Raises ChromiumMissing when there is none."""
    named = os.environ.get(CHROMIUM_ENV)
    if named:
        if os.path.isfile(named) and os.access(named, os.X_OK):
            return named
        raise ChromiumMissing(
            f"${CHROMIUM_ENV}={named} is not an executable file: point it at a Chromium or "
            "Chrome binary, or unset it to use the one installed"
        )
    if os.access(CHROMIUM, os.X_OK):
        return CHROMIUM
    for name in CHROMIUM_NAMES:
        if found := shutil.which(name):
            return found
    if found := _playwrights_chromium():
        return found
    raise ChromiumMissing(
        "the GUI task renders its pages in Chromium, and none was found: install Debian's "
        "(`apt-get install chromium`, which `make browser` runs; README: Installing), or "
        "Playwright's (`python -m playwright install chromium`), or set "
        f"{CHROMIUM_ENV} to a Chromium or Chrome binary; or leave gui out of "
        "data.synthetic.domains"
    )


def _playwrights_chromium() -> str | None:
    """The Chromium in Playwright's own browser folder, if one was downloaded there."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    with sync_playwright() as pw:
        path = pw.chromium.executable_path
    return path if path and os.path.isfile(path) else None


#: Pages rendered side by side on one sheet and taken in one screenshot: a screenshot costs
#: about the same for one 224 x 112 page as for a sheet of 32 (23 ms of the 32 a page took on
#: two cores), so the GUI data of ``rlcs demo`` (1,664 pages) renders in seconds, not a minute.
SHEET_PAGES = 32
#: the side of a sheet, in pixels: pages go side by side up to it, in rows down to it (a page
#: larger than that is a sheet of its own)
SHEET_PX = 1024
#: ``[x, y, width, height]`` of each page's elements ``#t{k}e0`` .. (``counts[k]`` of them on
#: page ``k``, the sheet's element ``#t{k}``), in that page's pixels.
ELEMENT_RECTS = """counts => counts.map((n, k) => {
    const t = document.getElementById("t" + k).getBoundingClientRect();
    return Array.from({length: n}, (_, i) => {
        const r = document.getElementById("t" + k + "e" + i).getBoundingClientRect();
        return [r.x - t.x, r.y - t.y, r.width, r.height];
    });
})"""
#: Moves every element that runs past its page's right edge (``width``) back onto it: the
#: layout leaves room for the labels in ``LABEL_FONT``, and a wider font could need more.
PULL_IN = """([counts, width]) => counts.forEach((n, k) => {
    const t = document.getElementById("t" + k).getBoundingClientRect();
    for (let i = 0; i < n; i++) {
        const e = document.getElementById("t" + k + "e" + i), r = e.getBoundingClientRect();
        if (r.right - t.x > width) e.style.left = Math.max(0, Math.floor(width - r.width - 1)) + "px";
    }
})"""


#: The labels' CSS font family: DejaVu Sans Bold from the file matplotlib ships (the math and
#: OCR glyphs' ``BOLD_FONT``), given to the page as a web font under a name no installed font
#: has, so that a page is drawn alike on every machine whatever fonts it has installed (where
#: the pages named installed fonts, a machine without them drew its own sans-serif).
LABEL_FONT = "rlcs-label"
#: Below difficulty 0.5 the labels are drawn as the math and OCR glyphs are: capitals in DejaVu
#: Sans Bold at 24 px (as ``draw_cells`` draws them), dark on a light button, one to an image
#: token and centred in it.
GRID_FONT = f"bold 24px {LABEL_FONT}"
#: What Chromium reads as its font configuration ($FONTCONFIG_FILE): no installed font, only
#: matplotlib's (the labels' own comes with the page), drawn with the settings of Debian's
#: (grey antialiasing, slight hinting), so that a page's pixels do not follow the fonts and the
#: font settings of the machine.
FONTCONFIG = """<?xml version="1.0"?>
<fontconfig>
  <dir>{fonts}</dir>
  <cachedir>{cache}</cachedir>
  <match target="font">
    <edit name="antialias" mode="assign"><bool>true</bool></edit>
    <edit name="hinting" mode="assign"><bool>true</bool></edit>
    <edit name="hintstyle" mode="assign"><const>hintslight</const></edit>
    <edit name="autohint" mode="assign"><bool>false</bool></edit>
    <edit name="rgba" mode="assign"><const>none</const></edit>
    <edit name="lcdfilter" mode="assign"><const>lcddefault</const></edit>
  </match>
</fontconfig>
"""
#: Puts a sheet's pages into the page's body; the document, and the font it loaded, stay.
FILL = "html => { document.body.innerHTML = html; }"
GRID_CELL = f"display:inline-block;width:{TOKEN_PX}px;text-align:center"
#: Below 0.5, light buttons with dark labels; from 0.5, ``COLORS`` with white ones.
LIGHT_COLORS = ["#bbdefb", "#c8e6c9", "#ffcdd2", "#e1bee7", "#ffe0b2", "#cfd8dc"]


class GuiTask(TaskGenerator):
    """Needs a Chromium (``find_chromium``, unless ``executable`` names one); the browser is
    started on first use and kept until ``close``."""

    domain = "gui"

    @classmethod
    def check_ready(cls) -> None:
        find_chromium()  # ChromiumMissing says how to install one

    def __init__(self, size: tuple[int, int] = (224, 112), executable: str | None = None):
        self.size, self.executable = size, executable
        width, height = size
        #: pages a sheet holds (``_draw`` asks for as many at a time)
        self.batch = min(SHEET_PAGES, max(1, SHEET_PX // width) * max(1, SHEET_PX // height))
        self._pw = self._browser = self._page = self._fonts = None

    def _page_handle(self, sheet: tuple[int, int]):
        """The browser's page, its viewport ``sheet`` pixels (started on first use)."""
        if self._page is None:
            from playwright.sync_api import sync_playwright

            executable = self.executable or find_chromium()
            self._fonts = tempfile.TemporaryDirectory(prefix="rlcs-gui-fonts-")
            conf = Path(self._fonts.name) / "fonts.conf"
            conf.write_text(FONTCONFIG.format(fonts=html.escape(str(font_dir())),
                                              cache=html.escape(self._fonts.name)))  # fmt: skip
            self._pw = sync_playwright().start()
            try:
                self._browser = self._pw.chromium.launch(
                    executable_path=executable, args=CHROMIUM_ARGS,
                    env={**os.environ, "FONTCONFIG_FILE": str(conf)},
                )  # fmt: skip
            except BaseException:
                self._pw.stop()  # else its driver process outlives the failed launch
                self._pw = None
                self._fonts.cleanup()
                raise
        viewport = {"width": sheet[0], "height": sheet[1]}
        if self._page is None:
            self._page = self._browser.new_page(viewport=viewport)
            self._page.set_content(_shell())
            loaded = "f => document.fonts.load(f).then(fs => fs.length)"
            if not self._page.evaluate(loaded, GRID_FONT):
                raise RuntimeError(
                    f"Chromium did not load the GUI pages' font ({font_path(BOLD_FONT)}) as a "
                    "web font; its pages would be drawn in another"
                )
        elif self._page.viewport_size != viewport:
            self._page.set_viewport_size(viewport)
        return self._page

    def close(self) -> None:
        if self._browser is not None:
            self._browser.close()
            self._pw.stop()
            self._fonts.cleanup()
        self._pw = self._browser = self._page = self._fonts = None

    def _check_layout(self, labels: list[str], rects: list[list[float]]) -> None:
        """A ValueError when an element is not wholly on the page or overlaps another: its box
        would be cut at the page's edge (or be empty), or the screenshot would not show it."""
        width, height = self.size
        boxes = [(x, y, x + w, y + h) for x, y, w, h in rects]
        problems = [f"{labels[i]} lies partly off it" for i, (x1, y1, x2, y2) in enumerate(boxes)
                    if x1 < 0 or y1 < 0 or x2 > width or y2 > height]  # fmt: skip
        problems += [
            f"{labels[i]} overlaps {labels[j]}"
            for i, j in itertools.combinations(range(len(boxes)), 2)
            if _overlap(boxes[i], boxes[j])
        ]
        if problems:
            raise ValueError(
                f"a {width}x{height} GUI page is too small for {len(labels)} elements "
                f"({problems[0]}): give GuiTask a larger size (the default 224x112 holds the 5 "
                "of difficulty 1)"
            )

    def _grid_elements(self, rng: random.Random, labels: list[str]) -> list[_Element]:
        """Below difficulty 0.5: a menu on the image-token grid. Each element is a row of whole
        tokens at the page's left edge, its label one glyph centred in each token (as
        ``draw_cells`` draws math and OCR text), so that reading a label is reading the glyphs
        that tokens in known places hold, not words straddling tokens at any offset: the demo's
        tiny model read one 11-px label in ten (chance), and 58% of these."""
        width, height = self.size
        cols, rows = width // TOKEN_PX, height // TOKEN_PX
        longest = max(len(label) for label in labels)
        if rows < len(labels) or cols < longest:
            raise ValueError(
                f"a {width}x{height} GUI page is too small for {len(labels)} elements on its "
                f"{cols}x{rows} grid of {TOKEN_PX}-px image tokens (a row each, a token a "
                f"letter of labels up to {longest} letters): give GuiTask a larger size (the "
                "default 224x112 holds them)"
            )
        elements = []
        taken = sorted(rng.sample(range(rows), len(labels)))  # a row each, top to bottom
        for label, row in zip(labels, taken, strict=True):
            kind = "a" if rng.random() < 0.3 else "button"
            cells = "".join(f'<span style="{GRID_CELL}">{html.escape(ch)}</span>' for ch in label)
            style = (
                f"position:absolute;left:0;top:{row * TOKEN_PX}px;"
                f"width:{len(label) * TOKEN_PX}px;height:{TOKEN_PX}px;padding:0;border:0;"
                f"font:{GRID_FONT};line-height:{TOKEN_PX}px;text-transform:uppercase;"
                f"white-space:nowrap;{_colors(rng, kind, light=True)}"
            )
            elements.append(_Element(kind, style, cells))
        return elements

    def _free_elements(self, rng: random.Random, labels: list[str]) -> list[_Element]:
        """From difficulty 0.5: 11-px labels anywhere along their rows, which spread down the
        page; small text straddling image tokens."""
        width, height = self.size
        n = len(labels)
        elements = []
        for i, label in enumerate(labels):
            kind = "a" if rng.random() < 0.3 else "button"
            # one row each, down the page; room on the right for the widest label (40 px)
            left, top = rng.randint(2, max(2, width - 42)), 4 + i * ((height - 8) // n)
            style = (
                f"position:absolute;left:{left}px;top:{top}px;"
                f"font:bold 11px/12px {LABEL_FONT};padding:2px 4px;border:0;{_colors(rng, kind)}"
            )
            elements.append(_Element(kind, style, html.escape(label)))
        return elements

    def _compose(self, rng: random.Random, difficulty: float) -> _Page:
        """Everything the page draws from ``rng``: its labels, the target and the layout."""
        n = 2 + round(difficulty * 3)
        labels = rng.sample(LABELS, n)
        target = rng.randrange(n)
        menu = difficulty < 0.5  # the easy end: a menu on the image-token grid
        layout = self._grid_elements if menu else self._free_elements
        return _Page(difficulty, labels, target, menu, layout(rng, labels))

    def sample(self, rng: random.Random, difficulty: float) -> Example:
        return self._render([self._compose(rng, difficulty)])[0]

    def sample_many(self, rng: random.Random, lo: float, hi: float, n: int) -> list[Example]:
        """``n`` pages drawn as ``n`` calls of ``sample`` draw them (the same examples, to the
        pixel), rendered a sheet (``batch`` pages) at a time."""
        pages = [self._compose(rng, rng.uniform(lo, hi)) for _ in range(n)]
        return [ex for k in range(0, n, self.batch)
                for ex in self._render(pages[k : k + self.batch])]  # fmt: skip

    def _render(self, pages: list[_Page]) -> list[Example]:
        """Lay ``pages`` out side by side on one sheet, each its own ``self.size`` box that
        clips what it holds, and read their element boxes and pixels back in one pass."""
        width, height = self.size
        cols = max(1, min(len(pages), SHEET_PX // width))
        origins = [((k % cols) * width, (k // cols) * height) for k in range(len(pages))]
        sheet = (cols * width, -(-len(pages) // cols) * height)
        tiles = []
        for k, (pg, (x0, y0)) in enumerate(zip(pages, origins, strict=True)):
            elements = "".join(
                f'<{e.tag} id="t{k}e{i}" style="{e.style}">{e.inner}</{e.tag}>'
                for i, e in enumerate(pg.elements)
            )
            tiles.append(
                f'<div id="t{k}" style="position:absolute;left:{x0}px;top:{y0}px;'
                f'width:{width}px;height:{height}px;overflow:hidden">{elements}</div>'
            )
        page = self._page_handle(sheet)
        page.evaluate(FILL, "".join(tiles))
        counts = [len(pg.labels) for pg in pages]
        # every element's box from the DOM in one call, not a browser round trip per element
        rects = page.evaluate(ELEMENT_RECTS, counts)
        if any(x + w > width for page_rects in rects for x, _, w, _ in page_rects):
            page.evaluate(PULL_IN, [counts, width])  # a label wider than the layout allows
            rects = page.evaluate(ELEMENT_RECTS, counts)
        for pg, page_rects in zip(pages, rects, strict=True):
            self._check_layout(pg.labels, page_rects)
        shot = Image.open(io.BytesIO(page.screenshot())).convert("RGB")
        return [
            self._example(pg, page_rects, shot.crop((x0, y0, x0 + width, y0 + height)))
            for pg, page_rects, (x0, y0) in zip(pages, rects, origins, strict=True)
        ]

    def _example(self, pg: _Page, rects: list[list[float]], img: Image.Image) -> Example:
        n, labels = len(pg.labels), pg.labels
        boxes = [to_norm_box((x, y, x + w, y + h), self.size) for x, y, w, h in rects]
        kinds = ["link" if e.tag == "a" else "button" for e in pg.elements]
        points = [[(b[0] + b[2]) // 2, (b[1] + b[3]) // 2] for b in boxes]
        t = pg.target
        box, point, label, kind = boxes[t], points[t], labels[t], kinds[t]
        if pg.menu:
            # read the menu top to bottom, each label with its row's y, then click the one
            # asked for: the tiny model did not find a named label's row in one step
            rows = ", ".join(f"{lab} {p[1]}" for lab, p in zip(labels, points, strict=True))
            reasoning = f"{rows}; {label} at {point[0]},{point[1]}"
        else:
            reasoning = f"{label} {kind} at {point[0]},{point[1]}"
        # every element and where it is: the captions teach where things are on a page
        where = [
            f"{lab} {k} at {p[0]},{p[1]}" for lab, k, p in zip(labels, kinds, points, strict=True)
        ]
        return Example(
            domain=self.domain,
            prompt=f"Click the {label} {kind}. Answer with one action as JSON.",
            image=img,
            answer={"action": "click", "box": box},
            answer_text=json.dumps({"action": "click", "point": point}, separators=(",", ":")),
            reasoning=reasoning,
            caption=f"A page with {n} elements: {', '.join(where)}.",
            meta={"difficulty": pg.difficulty, "labels": labels, "subcategory": f"{n} elements"},
        )


def _shell() -> str:
    """The document every sheet is drawn in: ``LABEL_FONT`` (the bytes of the font file, so that
    the page fetches nothing) and the sheet's background."""
    ttf = base64.b64encode(Path(font_path(BOLD_FONT)).read_bytes()).decode("ascii")
    face = (
        f"@font-face{{font-family:{LABEL_FONT};font-weight:bold;"
        f"src:url(data:font/ttf;base64,{ttf})}}"
    )
    return (
        f"<html><head><style>{face}</style></head>"
        "<body style='margin:0;background:#fafafa'></body></html>"
    )


class _Element(NamedTuple):
    """One element of a page: its tag (``a`` or ``button``), CSS and content."""

    tag: str
    style: str
    inner: str


class _Page(NamedTuple):
    """A page as drawn, before it is rendered."""

    difficulty: float
    labels: list[str]
    target: int
    menu: bool
    elements: list[_Element]


def _colors(rng: random.Random, kind: str, light: bool = False) -> str:
    """A button's colour (drawn from ``rng``) with white text, or a light one with dark text;
    a link's blue text."""
    if kind == "button":
        if light:
            return f"background:{rng.choice(LIGHT_COLORS)};color:#111"
        return f"background:{rng.choice(COLORS)};color:white"
    return "background:none;color:#0645ad"


def _overlap(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    """Whether two ``(x1, y1, x2, y2)`` boxes share an area (touching edges do not)."""
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
