"""Fixtures for the reward tests: one shared scorer (two worker processes) and helpers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
# Worker processes import test-only verifiers (``adversarial_verifiers``) by path.
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from rewards import RewardScorer  # noqa: E402

INJECTION = "__import__('os').system('touch {canary}')"


def glm(answer: str, think: str = "Let me work it out.") -> str:
    """A well-formed GLM response whose box holds ``answer``."""
    return f"<think>{think}</think><answer>So: <|begin_of_box|>{answer}<|end_of_box|></answer>"


@pytest.fixture(scope="session")
def scorer():
    s = RewardScorer(2, timeout_s=2.0)
    yield s
    s.close()
