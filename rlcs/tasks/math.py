"""Arithmetic rendered as an image; the answer is a number."""

from __future__ import annotations

import random

from rlcs.tasks.base import Example, TaskGenerator, add_noise, draw_cells

OP_NAMES = {"+": "addition", "-": "subtraction", "*": "multiplication"}


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
        # the image shows the expression without spaces, one character per image token
        img = draw_cells(expr.replace(" ", ""), rng, difficulty, self.size)
        img = add_noise(img, rng, amount=0.3 * max(0.0, difficulty - 0.3))
        return Example(
            domain=self.domain,
            prompt="Compute the value of the expression in the image.",
            image=img,
            answer=str(value),
            answer_text=str(value),
            reasoning=f"{expr} = {value}",
            caption=f"An image of the arithmetic expression {expr}, which equals {value}.",
            meta={"expression": expr, "difficulty": difficulty, "subcategory": OP_NAMES[op]},
            text_prompt=f"Compute the value of {expr}.",
        )
