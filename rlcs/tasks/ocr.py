"""Short words or codes rendered with varied fonts and noise; the answer is the text."""

from __future__ import annotations

import random
import string

from rlcs.tasks.base import Example, TaskGenerator, add_noise, draw_cells

WORDS = ["CAT", "SUN", "MAP", "RED", "BOX", "KEY", "TOP", "AIR", "NET", "CUP", "ZIP", "FOG"]
#: Letters and digits for codes, less the pairs a reader cannot tell apart among a code's
#: random characters at the fonts and sizes used (O and 0 in the monospaced fonts, as wide as
#: each other with a dot that speckle noise fakes or hides; I and 1 in the serif ones): a
#: code's ground truth must be readable from its image. Words keep their letters.
AMBIGUOUS = "O0I1"
CODE_CHARS = "".join(c for c in string.ascii_uppercase + string.digits if c not in AMBIGUOUS)
# Codes replace words gradually: none at or below CODES_FROM, all from CODES_ALL, a linear mix
# between, so the difficulty knob has no cliff (a code is far harder than a word to read)
CODES_FROM, CODES_ALL = 0.3, 0.6


class OcrTask(TaskGenerator):
    domain = "ocr"

    def __init__(self, size: tuple[int, int] = (112, 56)):
        self.size = size

    def sample(self, rng: random.Random, difficulty: float) -> Example:
        # no random draw at or below CODES_FROM: the word-only range's items stay the same
        word = difficulty <= CODES_FROM or (
            difficulty < CODES_ALL
            and rng.random() >= (difficulty - CODES_FROM) / (CODES_ALL - CODES_FROM)
        )
        if word:
            text = rng.choice(WORDS)
        else:
            text = "".join(rng.choice(CODE_CHARS) for _ in range(3 + round(difficulty * 3)))
        img = draw_cells(text, rng, difficulty, self.size, ink=(rng.randint(0, 60),) * 3)
        img = add_noise(img, rng, amount=max(0.0, difficulty - 0.3))
        return Example(
            domain=self.domain,
            prompt="Read the text in the image.",
            image=img,
            answer=text,
            answer_text=text,
            reasoning=" ".join(text),
            caption=f"An image with the text {text} written on it.",
            meta={"difficulty": difficulty, "subcategory": "word" if word else "code"},
            text_prompt=f"Repeat this code exactly: {text}",
        )
