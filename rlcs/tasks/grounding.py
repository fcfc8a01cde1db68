"""Find the box of a described shape among distractors; boxes in 0-999 coordinates."""

from __future__ import annotations

import random

from PIL import Image, ImageDraw

from rlcs.tasks.base import Example, TaskGenerator, add_noise, to_norm_box

COLORS = {
    "red": (220, 30, 30),
    "green": (30, 160, 60),
    "blue": (40, 70, 220),
    "orange": (240, 150, 20),
}
SHAPES = ("square", "circle")


class GroundingTask(TaskGenerator):
    domain = "grounding"

    def __init__(self, size: tuple[int, int] = (112, 112)):
        self.size = size

    def _place(
        self, rng: random.Random, taken: list[tuple[int, int, int, int]], side: int, grid: int = 0
    ):
        """A free spot for a ``side``-pixel shape; on a ``grid``-pixel lattice if ``grid``."""
        w, h = self.size
        for _ in range(50):
            if grid:
                x = rng.choice(range(2, w - side - 1, grid))
                y = rng.choice(range(2, h - side - 1, grid))
            else:
                x, y = rng.randint(2, w - side - 2), rng.randint(2, h - side - 2)
            box = (x, y, x + side, y + side)
            if all(box[2] < o[0] or o[2] < box[0] or box[3] < o[1] or o[3] < box[1] for o in taken):
                return box
        return None

    def sample(self, rng: random.Random, difficulty: float) -> Example:
        img = Image.new("RGB", self.size, "white")
        draw = ImageDraw.Draw(img)
        color, shape = rng.choice(list(COLORS)), rng.choice(SHAPES)
        n_distractors = round(difficulty * 4)
        # Easy: one size of shape on a 3x3 lattice, so "top left" and the like pin the box down.
        # Harder: any size and any place.
        easy = difficulty < 0.5
        side = 40 if easy else rng.randint(36, 48) - round(difficulty * 20)
        grid = 28 if easy else 0
        target = self._place(rng, [], side, grid)
        drawn = [(target, color, shape)]  # (box, colour, shape) of every shape in the picture
        others = [(c, s) for c in COLORS for s in SHAPES if (c, s) != (color, shape)]
        for _ in range(n_distractors):
            box = self._place(rng, [d[0] for d in drawn], side, grid)
            if box is None:
                break
            c, s = rng.choice(others)
            drawn.append((box, c, s))
            self._draw(draw, box, c, s)
        self._draw(draw, target, color, shape)
        img = add_noise(img, rng, amount=0.2 * difficulty)
        norm = to_norm_box(target, self.size)
        where = _where(target, self.size)
        return Example(
            domain=self.domain,
            prompt=f"Find the {color} {shape}. Answer with its box [x1,y1,x2,y2] in 0-999 coordinates.",
            image=img,
            answer=[norm],
            answer_text=str(norm).replace(" ", ""),
            reasoning=f"{color} {shape}, {where}",
            caption=_caption(drawn, self.size),
            meta={"difficulty": difficulty, "subcategory": shape},
        )

    @staticmethod
    def _draw(draw: ImageDraw.ImageDraw, box, color: str, shape: str) -> None:
        if shape == "square":
            draw.rectangle(box, fill=COLORS[color])
        else:
            draw.ellipse(box, fill=COLORS[color])


def _caption(drawn, size) -> str:
    """Every shape and where it is, in reading order: the vision tower learns where things are
    from every shape of the picture, not only from the one a question asks about."""
    order = sorted(drawn, key=lambda d: (d[0][1], d[0][0]))
    parts = [f"{'an' if c[0] in 'aeiou' else 'a'} {c} {s} in the {_where(box, size)}"
             for box, c, s in order]  # fmt: skip
    text = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return text[0].upper() + text[1:] + "."


def _where(box, size) -> str:
    cx, cy = (box[0] + box[2]) / 2 / size[0], (box[1] + box[3]) / 2 / size[1]
    v = "top" if cy < 0.4 else ("bottom" if cy > 0.6 else "middle")
    h = "left" if cx < 0.4 else ("right" if cx > 0.6 else "centre")
    return "centre" if (v, h) == ("middle", "centre") else f"{v} {h}"
