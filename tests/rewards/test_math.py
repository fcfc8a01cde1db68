"""Math equivalence: by value, not spelling; near misses and adversarial answers stay wrong."""

from __future__ import annotations

import pytest
from conftest import glm

from rewards.verifiers.math import MathVerifier

V = MathVerifier()

RIGHT = [
    ("5", "5"),
    ("x = 5", "5"),
    ("5", "x=5"),
    ("\\frac{1}{2}", "0.5"),
    ("1/2", "\\frac12"),
    ("\\dfrac{3}{4}", "0.75"),
    ("50\\%", "0.5"),
    ("50%", "50"),
    ("1.5e-3", "0.0015"),
    ("1.5\\times10^{-3}", "0.0015"),
    ("1,000", "1000"),
    ("5 \\text{ cm}", "5"),
    ("30^\\circ", "30"),
    ("\\$5", "5"),
    ("\\sqrt{2}/2", "\\frac{\\sqrt2}{2}"),
    ("sqrt(2)/2", "\\frac{\\sqrt{2}}{2}"),
    ("2\\sqrt{3}", "\\sqrt{12}"),
    ("\\pi", "3.14159265358979"),
    ("2\\pi", "6.283185307"),
    ("0.3333333", "\\frac{1}{3}"),
    ("\\frac{2005 \\cdot 2006}{2006!}", "\\frac{1}{2004!}"),
    ("[1,2)", "[1,2)"),
    ("(1,2]\\cup[3,4)", "[3,4)\\cup(1,2]"),
    ("\\{1,2\\}", "\\{2,1\\}"),
    ("x \\in [1,2)", "[1,2)"),
    ("(1,2)", "(1, 2)"),
    ("(\\frac{1}{2}, 3)", "(0.5, 3)"),
    ("B", "B"),
    ("(B)", "B"),
    ("\\text{(B)}", "(B)"),
    ("y=2x+1", "y = 2x + 1"),
    ("2y=4x+2", "y=2x+1"),
    ("2x + 1 = y", "y = 2x + 1"),
    ("x^2+2x+1", "(x+1)^2"),
    ("\\sin^{2}(3x)+\\cos^{2}(3x)", "1"),
    ("3/2", "1\\frac{1}{2}"),
    ("x=2, y=3", "(2,3)"),
    ("y=3, x=2", "(2, 3)"),
    ("(-\\infty, 2)", "x<2"),
    ("x \\geq 2", "[2, \\infty)"),
    ("5 cm", "5"),
    ("3 m/s", "3"),
    ("\\sin^{2}(32x)+\\cos^{2}(32x)", "1"),
    ("\\log(xy)", "\\log x+\\log y"),
    ("\\frac{x^2-1}{x-1}", "x+1"),
    ("\\infty", "\\infty"),
    (
        "\\begin{pmatrix}1 & 2\\\\ 3 & 4\\end{pmatrix}",
        "\\begin{pmatrix}1 & 2\\\\ 3 & 4.0\\end{pmatrix}",
    ),
    ("\\sin(x)^{2}+\\cos(x)^{2}", "1"),  # was read as sin(x^2) + cos(x^2)
    ("\\sin 2x", "2\\sin x\\cos x"),
    ("2e3 \\cdot 2", "4000"),  # e-notation inside an expression, not 2 * e * 3 * 2
    ("1.5e-3+1", "1.0015"),
    ("\\emptyset", "\\varnothing"),
    ("\\varnothing", "\\{\\}"),
    ("-3 \\leq x \\leq 3", "[-3,3]"),
    ("-3 < x \\le 3", "(-3, 3]"),
]

WRONG = [
    ("\\frac{1}{2004!}", "\\frac{1}{2006!}"),
    ("[1,2)", "[1,2]"),
    ("(1,2)", "[1,2]"),
    ("(1,2)", "(2,1)"),
    ("\\{1,2\\}", "\\{1,2,3\\}"),
    ("0.3333", "\\frac{1}{3}"),
    ("3.14", "\\pi"),
    ("1.00001", "1"),
    ("C", "B"),
    ("y=2x+2", "y=2x+1"),
    ("x^2+2x", "(x+1)^2"),
    ("-\\infty", "\\infty"),
    ("x", "y"),
    ("x=3, y=2", "(2,3)"),
    ("(2, \\infty)", "x \\geq 2"),
    ("1\\frac{1}{2}", "1"),
    ("5 cm", "6"),
    ("x+10^{-25}", "x"),
    ("x + \\sin(3\\pi x)", "x"),
    ("\\sqrt{x^2}", "x"),
    ("2019", "2018"),
    ("\\sin(x)^{2}", "\\sin(x^{2})"),
    ("3e-2x", "0.03x"),  # a letter follows: 3e - 2x
    ("3e - 2", "0.03"),  # spaces around the minus: 3e - 2, not e-notation
    ("3e -2", "0.03"),
    ("3e- 2", "0.03"),
    ("3 e-2", "0.03"),
    ("1.5 e - 3", "0.0015"),
    ("\\text{A} \\text{B}", "\\text{A}"),  # \\text{B} is a word, not a unit to strip
    ("-3 < x \\leq 3", "[-3,3]"),
]


@pytest.mark.parametrize(("pred", "gt"), RIGHT)
def test_equivalent_answers_score_one(pred, gt):
    assert V.verify(pred, gt, {}) == (1.0, None, None)


@pytest.mark.parametrize(("pred", "gt"), WRONG)
def test_near_misses_score_zero(pred, gt):
    assert V.verify(pred, gt, {}).reward == 0.0


def test_relative_tolerance_is_configurable():
    assert V.verify("3.14", "\\pi", {"rel_tol": 1e-3}).reward == 1.0
    assert V.verify("100.001", "100", {}).reward == 0.0
    assert V.verify("100.00001", "100", {}).reward == 1.0


@pytest.mark.parametrize(
    "pred",
    [
        "9^{9^{9^{9}}}",
        "1" * 100_000,
        "(" * 5000 + "1" + ")" * 5000,
        "__import__('os').system('ls')",
        "\\frac{1}{0}",
    ],
)
def test_pathological_answers_return_quickly_and_wrong(pred):
    import time

    start = time.monotonic()
    res = V.verify(pred, "5", {})
    assert res.reward == 0.0
    assert time.monotonic() - start < 2.0


def test_an_unreadable_answer_is_a_parse_error():
    res = V.verify("(" * 500 + "1" + ")" * 500, "1", {})
    assert res.error == "parse" and "nesting" in res.detail


@pytest.mark.parametrize(
    ("pred", "detail"),
    [
        ("x + \\frac{1}{", "cannot parse at the end: I expected something else here"),
        ("a + \\foo{x}", "cannot parse near '\\\\foo{x}': I don't understand this"),
    ],
)
def test_a_grammar_failure_says_where_the_answer_stopped_parsing(pred, detail):
    res = V.verify(pred, "1", {})
    assert (res.reward, res.error, res.detail) == (0.0, "parse", detail)


def test_identical_towers_match_without_evaluation():
    assert V.verify("9^{9^{9^{9}}}", "9^{9^{9^{9}}}", {}).reward == 1.0


@pytest.mark.parametrize(
    "pred",
    ["10^{10^{10}} - 10^{10^{10}} + 5", "(\\sqrt{2})^{10^{9}}", "2^{10^{10}/3}", "\\pi^{100000}"],
)
def test_powers_too_large_to_compute_are_parse_errors_not_hangs(pred):
    import time

    start = time.monotonic()
    res = V.verify(pred, "5", {})
    assert (res.reward, res.error) == (0.0, "parse") and "too large" in res.detail
    assert time.monotonic() - start < 0.5


def test_through_the_pool_equal_answers_share_one_verification(scorer):
    items = [{"domain": "math", "response": glm("\\frac{6}{8}"), "answer": "0.75"}] * 8
    results = scorer.score_batch(items)
    assert [r.reward for r in results] == [1.0] * 8
    assert sum(r.cached for r in results) >= 7


def test_integers_match_exactly_while_decimals_keep_the_tolerance():
    assert V.verify("1000001", "1000000", {}).reward == 0.0
    assert V.verify("123456789", "123456788", {}).reward == 0.0
    assert V.verify("2^{20} + 1", "1048576", {}).reward == 0.0
    assert V.verify("1000000.0000001", "1000000", {}).reward == 1.0
    assert V.verify("3.1415927", "\\pi", {}).reward == 1.0


@pytest.mark.parametrize(
    "pred, truth, detail",
    [
        ("\\frac{1}{0}", "1", "undefined value"),
        ("1/0", "1", "undefined value"),
        ("0/0", "0", "undefined value"),
        ("100000\\cdot 99999!", "100000!", "too large to compare"),
        # Python's 9**9**9 is 9^(9^9); the LaTeX grammar would read (9^9)^9 = 9^81
        ("9**9**9", "9^{81}", "double superscript"),
        ("x^2^3", "x^6", "double superscript"),
    ],
)
def test_answers_that_cannot_be_compared_are_errors_not_silent_zeros(pred, truth, detail):
    v = V.verify(pred, truth, {})
    assert (v.reward, v.error) == (0.0, "parse") and detail in v.detail


@pytest.mark.parametrize(
    ("pred", "gt"),
    [
        ("2^{\\sqrt{2}}", "2.66514414269023"),
        ("\\pi^{\\sqrt{2}}", "5.04749726737700"),
        ("\\sqrt{2}^{\\sqrt{2}}", "1.63252691943815"),
        ("e^{e^{2}}", "1618.17799191265"),
    ],
)
def test_ordinary_irrational_powers_are_compared_not_refused_as_too_large(pred, gt):
    """A power whose exponent holds a root (2^{sqrt 2}) used to count as 'too large to
    compare': a right answer scored 0 as unreadable."""
    assert V.verify(pred, gt, {}) == (1.0, None, None)
    assert V.verify(pred, "2.7", {}) == (0.0, None, None)


@pytest.mark.parametrize(
    "pred",
    [
        "2^{3^{4^{5}}}",  # used to raise OverflowError: a 'verifier' error, dropped from training
        "e^{e^{e^{e^{10}}}}",  # the same, from mpmath
        "\\exp(\\exp(\\exp(100)))",  # used to run until the worker was killed
        "1e999999999",  # Fraction computed 10^999999999: a timeout
        "1.5e-123456",
    ],
)
def test_towers_and_huge_exponents_are_refused_at_once(scorer, pred):
    import time

    start = time.monotonic()
    res = scorer.score("math", glm(pred), "5")  # in a worker: a regression times out, not hangs
    assert (res.reward, res.error) == (0.0, "parse") and "too large" in res.detail
    assert time.monotonic() - start < 1.0


@pytest.mark.parametrize(
    ("pred", "gt"),
    [("A or B", "A"), ("A B C D", "A"), ("(A) (B)", "(A)"), ("A:B", "A"), ("B. C. D.", "B"),
     ("\\text{A or B}", "A")],
)  # fmt: skip
def test_a_choice_answer_naming_several_letters_is_wrong(pred, gt):
    """A hedge used to be scored by its first letter: "A or B" got full reward when A was right."""
    assert V.verify(pred, gt, {}).reward == 0.0
    assert V.verify("(" + gt.strip("()") + ") 42", gt, {}).reward == 1.0  # a letter, its content


@pytest.mark.parametrize("truth", [{"ans": "5"}, True, False, ["5"]])
def test_a_ground_truth_that_is_not_a_string_or_a_number_is_an_answer_error(scorer, truth):
    """str() of an object or a boolean used to be compared: a silent 0 at every draw (and a 1
    for the text "True"), and the dataset check let it through."""
    from rewards import answer_problem

    for domain in ("math", "chart"):
        res = scorer.score(domain, glm(str(truth)), truth)
        assert (res.reward, res.error) == (0.0, "answer")
        assert res.detail.startswith("ground truth: a string or a number is expected")
        assert answer_problem(domain, truth) == res.detail  # and datasets are checked at load
    assert scorer.score("math", glm("True"), "True").reward == 1.0  # the text is fine
    assert scorer.score("math", glm("5"), 5).reward == 1.0 and answer_problem("math", 5.0) is None


@pytest.mark.parametrize("truth", [float("nan"), "nan", "NaN", " NAN ", "-nan"])
def test_a_nan_ground_truth_is_an_answer_error(scorer, truth):
    """NaN is a missing value (a spreadsheet's empty cell), not an answer: it scored a silent 0
    at every draw, or 1 for a model that wrote "nan"."""
    from rewards import answer_problem

    for domain in ("math", "chart"):
        for response in (glm("nan"), glm("5")):
            res = scorer.score(domain, response, truth)
            assert (res.reward, res.error) == (0.0, "answer")
            assert res.detail == (
                "ground truth: NaN is a missing value, not an answer; give the answer, or "
                "leave the item out"
            )
        assert answer_problem(domain, truth) == res.detail  # and datasets are checked at load
    assert scorer.score("math", glm("nano"), "nano").reward == 1.0  # a word is fine


def test_many_large_e_notation_numbers_are_refused_at_once():
    """e-notation is now read as a number inside expressions: a product of many 9e9999 took
    seconds of big-integer arithmetic before scoring 0."""
    import time

    start = time.monotonic()
    res = V.verify(" \\cdot ".join(["9e9999"] * 100), "5", {})
    assert (res.reward, res.error) == (0.0, "parse") and "too large" in res.detail
    assert time.monotonic() - start < 0.5
    assert V.verify("1e9999 \\cdot 2", "2 \\cdot 10^{9999}", {}).reward == 1.0
