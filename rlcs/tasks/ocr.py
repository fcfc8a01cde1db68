"""Short words or codes rendered with varied fonts and noise; the answer is the text."""

from __future__ import annotations

import random
import string

from PIL import Image, ImageDraw

from rlcs.tasks.base import Example, TaskGenerator, add_noise, pick_font

WORDS = ["CAT", "SUN", "MAP", "RED", "BOX", "KEY", "TOP", "AIR", "NET", "CUP", "ZIP", "FOG"]
CODE_CHARS = string.ascii_uppercase + string.digits


class OcrTask(TaskGenerator):
    domain = "ocr"

    def __init__(self, size: tuple[int, int] = (112, 56)):
        self.size = size

    def sample(self, rng: random.Random, difficulty: float) -> Example:
        if difficulty < 0.4:
            text = rng.choice(WORDS)
        else:
            text = "".join(rng.choice(CODE_CHARS) for _ in range(3 + round(difficulty * 3)))
        img = Image.new("RGB", self.size, "white")
        draw = ImageDraw.Draw(img)
        font = pick_font(rng, size=16 + rng.randint(0, 4), varied=True)
        left, t, r, b = draw.textbbox((0, 0), text, font=font)
        x = rng.randint(2, max(2, self.size[0] - (r - left) - 2))
        y = rng.randint(2, max(2, self.size[1] - (b - t) - 2)) - t
        draw.text((x, y), text, fill=(rng.randint(0, 60),) * 3, font=font)
        img = add_noise(img, rng, amount=0.2 + 0.6 * difficulty)
        return Example(
            domain=self.domain,
            prompt="Read the text in the image.",
            image=img,
            answer=text,
            answer_text=text,
            reasoning=" ".join(text),
            caption=f"An image with the text {text} written on it.",
            meta={"difficulty": difficulty},
            text_prompt=f"Repeat this code exactly: {text}",
        )
