"""The fast LaTeX parser agrees with latex2sympy2_extended, and no input breaks a verifier."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from latex2sympy2_extended import latex2sympy

from rewards import FormatError, extract
from rewards.verifiers import latex_fast
from rewards.verifiers.math import MathVerifier, equal
from rewards.verifiers.math_parse import to_sympy
from rewards.verifiers.math_text import normalize

SAME_MEANING = [
    "17\\sqrt{2}",
    "\\frac{17\\pi}{33}",
    "[17,50)",
    "(x+17)(x+33)",
    "x^2+50x+561",
    "\\{133, 17\\}",
    "\\frac{1}{2004!}",
    "2x+1=y",
    "\\sin x + \\cos(2x)",
    "(1,2]\\cup[3,4)",
    "1,2,3",
    "(1,2,3)",
    "-\\infty",
    "\\sqrt[3]{8}",
    "e^{2}",
    "2^{10}",
    "a_1+a_{10}",
    "\\frac{a}{b}c",
    "3\\cdot 4 - 2/5",
    "-(x-1)^{3}",
    "\\sin(x)^{2}+\\cos(x)^{2}",  # the power of the value, not of the argument
    "\\sin(2x)^{3}y",
    "\\sin{x}^2",  # renders as sin x², as \sin x^2 does
    "\\sin x^2",
    "\\sin x \\cos x",
    "\\sin(x)!",
    "(2,1)",  # an empty interval would be: a pair, as in latex2sympy
    "(1,1)",
    "[2,1]",
]


@pytest.mark.parametrize("text", SAME_MEANING)
def test_fast_parser_means_what_latex2sympy_means(text):
    assert equal(latex_fast.parse(text), latex2sympy(text), 1e-9)


@pytest.mark.parametrize(
    "text",
    ["\\log_2 8", "f(x)", "\\begin{pmatrix}1\\end{pmatrix}", "x \\le 3", "\\sin 2x", "\\sin x y"],
)
def test_fast_parser_hands_unknown_syntax_to_the_full_grammar(text):
    with pytest.raises(latex_fast.Unsupported):
        latex_fast.parse(text)
    to_sympy(text)  # the fallback reads it


MATH_CHARS = st.sampled_from(
    list("0123456789+-*/^()[]{},.=!xyz ")
    + ["\\frac", "\\sqrt", "\\pi", "\\infty", "\\{", "\\}", "\\cup", "e"]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(MATH_CHARS, max_size=25).map("".join), st.lists(MATH_CHARS, max_size=12).map("".join)
)
def test_any_math_text_gets_a_verdict_in_range(pred, gt):
    verdict = MathVerifier().verify(pred, gt, {})
    assert 0.0 <= verdict.reward <= 1.0
    # a truth with nothing in it ("", " ", ".") is no answer: an answer error
    assert verdict.error in (None, "parse") or (verdict.error, normalize(gt)) == ("answer", "")


TAGS = st.sampled_from(["<think>", "</think>", "<answer>", "</answer>", "<|begin_of_box|>",
                        "<|end_of_box|>", "\\boxed{", "\\boxed", "}", "{", " ", "\n", "42",
                        "x"])  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(st.lists(TAGS, max_size=14).map("".join), st.sampled_from(["glm", "bare", "boxed"]))
def test_the_gate_returns_text_or_a_format_error_for_any_tag_soup(response, fmt):
    try:
        out = extract(response, fmt)
    except FormatError as e:
        assert str(e)
    else:
        assert isinstance(out, str)
        if fmt == "glm":
            assert response.strip().startswith("<think>") and response.strip().endswith("</answer>")


BOX = st.tuples(
    st.integers(0, 998), st.integers(0, 998), st.integers(1, 300), st.integers(1, 300)
).map(lambda b: [b[0], b[1], min(999, b[0] + b[2]), min(999, b[1] + b[3])])


@settings(max_examples=200, deadline=None)
@given(st.lists(BOX, min_size=1, max_size=4), st.lists(BOX, min_size=1, max_size=4))
def test_box_iou_equals_the_general_polygon_intersection(pred, gt):
    import numpy as np
    import shapely

    from rewards.verifiers.boxes import iou_matrix

    p, g = shapely.box(*np.asarray(pred, float).T), shapely.box(*np.asarray(gt, float).T)
    inter = shapely.area(shapely.intersection(p[:, None], g[None, :]))
    expected = inter / (shapely.area(p)[:, None] + shapely.area(g)[None, :] - inter)
    assert np.allclose(iou_matrix(pred, gt), expected)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60), st.sampled_from(["chart", "grounding", "gui", "vqa", "ocr"]))
def test_any_text_gets_a_verdict_in_range_in_every_domain(text, domain):
    from rewards.verifiers.chart import ChartVerifier
    from rewards.verifiers.grounding import GroundingVerifier
    from rewards.verifiers.gui import GUIVerifier
    from rewards.verifiers.ocr import OCRVerifier
    from rewards.verifiers.vqa import VQAVerifier

    verifier, answer = {
        "chart": (ChartVerifier(), "2019"),
        "grounding": (GroundingVerifier(), [[0, 0, 100, 100]]),
        "gui": (GUIVerifier(), {"action": "click", "box": [0, 0, 100, 100]}),
        "vqa": (VQAVerifier(), "three"),
        "ocr": (OCRVerifier(), "hello"),
    }[domain]
    verdict = verifier.verify(text, answer, {})
    assert 0.0 <= verdict.reward <= 1.0
    assert verdict.error in (None, "parse")


@settings(max_examples=500, deadline=None)
@given(st.lists(TAGS, max_size=16).map("".join))
def test_marker_hopping_gate_agrees_with_the_counting_gate(response):
    from rewards.extract import _glm_hop, _glm_scan

    def outcome(gate):
        try:
            return gate(response.strip())
        except FormatError as e:
            return f"error: {e}"

    assert outcome(_glm_hop) == outcome(_glm_scan)
