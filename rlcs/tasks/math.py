"""Arithmetic rendered as an image; the answer is a number."""

from __future__ import annotations

import random

from PIL import Image, ImageDraw

from rlcs.tasks.base import Example, TaskGenerator, add_noise, pick_font


class MathTask(TaskGenerator):
    domain = "math"

    def __init__(self, size: tuple[int, int] = (112, 56)):
        self.size = size

    def sample(self, rng: random.Random, difficulty: float) -> Example:
        hi = 9 if difficulty < 0.34 else (20 if difficulty < 0.67 else 99)
        ops = ["+"] if difficulty < 0.25 else (["+", "-"] if difficulty < 0.6 else ["+", "-", "*"])
        a, b, op = rng.randint(0, hi), rng.randint(0, hi), rng.choice(ops)
        if op == "*":
            b = rng.randint(0, 9)
        value = {"+": a + b, "-": a - b, "*": a * b}[op]
        expr = f"{a} {op} {b}"
        img = Image.new("RGB", self.size, "white")
        draw = ImageDraw.Draw(img)
        font = pick_font(rng, size=18 + rng.randint(0, 4), varied=difficulty > 0.5)
        left, t, r, btm = draw.textbbox((0, 0), expr, font=font)
        x = rng.randint(2, max(2, self.size[0] - (r - left) - 2))
        y = rng.randint(2, max(2, self.size[1] - (btm - t) - 2)) - t
        draw.text((x, y), expr, fill="black", font=font)
        img = add_noise(img, rng, amount=0.3 * difficulty)
        return Example(
            domain=self.domain,
            prompt="Compute the value of the expression in the image.",
            image=img,
            answer=str(value),
            answer_text=str(value),
            reasoning=f"{expr} = {value}",
            caption=f"An image of the arithmetic expression {expr}.",
            meta={"expression": expr, "difficulty": difficulty},
            text_prompt=f"Compute the value of {expr}.",
        )
