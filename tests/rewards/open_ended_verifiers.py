"""An open-ended (non-verifiable) domain's verifier, as a user would write one around a reward
model: here a stand-in that rewards an answer by its length (imported by path)."""

from __future__ import annotations

from rewards.base import Verdict, Verifier


class LengthJudge(Verifier):
    needs_answer = False  # open-ended items have no ground truth
    answer_box = False  # and no boxed answer: the whole answer text is judged

    def verify(self, extracted, answer, options):
        return Verdict(min(1.0, len(extracted.split()) / 10))
