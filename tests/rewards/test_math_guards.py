"""Math answers the verifier refuses, and how fast: pathological and oversized input, powers
too large to evaluate, values that cannot be compared, and ground truths that are no answer.
Each is a specific error (never a silent 0) and costs at most a fraction of its timeout."""

from __future__ import annotations

import pytest
from conftest import glm

from rewards.verifiers.math import MathVerifier

V = MathVerifier()


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
        # these raised out of the verifier: counted as a verifier error, dropped from training
        ("\\cot 0", "1", "undefined value (a division by zero)"),
        ("(-1)!", "24", "cannot evaluate: ValueError: gamma function pole"),
        ("\\int x\\,dx", "\\frac{x^2}{2}", "cannot evaluate: ValueError: Invalid limits"),
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


@pytest.mark.parametrize(
    ("pred", "detail"),
    [
        ("\\operatorname{zeros}(40000,40000)", "a matrix too large (over 10000 entries)"),
        ("\\operatorname{zeros}(4 0000, 1)", "a matrix too large (over 10000 entries)"),
        ("\\operatorname{ones}(101, 100)", "a matrix too large (over 10000 entries)"),
        ("\\operatorname{eye}(40000)", "a matrix too large (over 10000 entries)"),
        ("\\operatorname{eye}{101}", "a matrix too large (over 10000 entries)"),
        ("\\operatorname{ones}(2^{20}, 1)", "a matrix size must be written as plain integers"),
    ],
)
def test_huge_matrices_are_refused_before_they_are_built(scorer, pred, detail):
    """zeros(40000, 40000) ran the worker out of memory: a crash, dropped from training."""
    res = scorer.score("math", glm(pred), "5")  # in a worker: a regression is a crash
    assert (res.reward, res.error, res.detail) == (0.0, "parse", detail)


@pytest.mark.parametrize("truth", ["", "   ", "$ $", "\\,"])
def test_an_empty_ground_truth_is_an_answer_error(scorer, truth):
    """An empty cell exported as text (not NaN) was a truth like any other: an empty box
    scored 1 against it, and every real answer 0."""
    from rewards import answer_problem

    for domain in ("math", "chart"):
        for response in (glm(""), glm("5")):
            res = scorer.score(domain, response, truth)
            assert (res.reward, res.error) == (0.0, "answer"), (domain, response, res)
            assert res.detail == (
                "ground truth: empty, no answer; give the answer, or leave the item out"
            )
        assert answer_problem(domain, truth) == res.detail  # and datasets are checked at load
    assert scorer.score("math", glm("0"), "0").reward == 1.0  # zero is an answer


@pytest.mark.parametrize("pred", ["2^3^2", "x^a^b", "x^{2}^{3}", "x^\\pi^2", "x^2.5^2"])
def test_a_double_superscript_is_still_refused(pred):
    res = MathVerifier().verify(pred, "1", {})
    assert (res.reward, res.error) == (0.0, "parse") and "double superscript" in res.detail


#: conditions whose polynomial SymPy's ``as_set`` would solve for seconds or minutes (the
#: first ran until the worker's timeout): alone, joined by "or" or "and", in a chain, in
#: set-builder notation, as equations, under a radical, a function or a denominator
_COSTLY_CONDITIONS = [
    ("x^{50}+x > 3", "degree 50"),
    ("x^{50}+x > 3 \\text{ or } x < -5", "degree 50"),
    ("x^{50}+x > 3 \\text{ and } x < 5", "degree 50"),
    ("-3 < x^{50}+x < 3", "degree 50"),
    ("\\{x \\mid x^{50}+x>3\\}", "degree 50"),
    ("\\{x \\in \\mathbb{R} : x^{50}+x>3 \\text{ or } x < 0\\}", "degree 50"),
    ("\\{x \\mid x^{50}+x=3\\}", "degree 50"),
    ("x = 2 \\text{ or } x^{50}+x = 3", "degree 50"),
    ("x^{20}+x \\geq 3", "degree 20"),  # 2 s
    ("x^4 + x > 3", "degree 4"),  # 0.8 s, and SymPy gives up (a ConditionSet)
    ("\\sqrt[50]{x} + x > 3", "degree 50"),  # x^{1/50} = y: y^{50} + y > 3
    ("2^{x^{50}+x} > 8", "degree 50"),
    ("|x^{50}+x| < 3", "degree 50"),
    ("\\frac{x-1}{x^{50}+x-3} > 0", "degree 50"),
    ("\\frac{1}{x-1} + \\frac{1}{x-2} + \\frac{1}{x-3} > 3", "degree 3"),  # 3 s
    ("(x-1)^{1000} > 0", "total degree 1000"),
]


@pytest.mark.parametrize(("pred", "degree"), _COSTLY_CONDITIONS)
def test_a_condition_too_costly_to_solve_is_a_parse_error_at_once(scorer, pred, degree):
    """x^{50} + x > 3 ran SymPy's inequality solver until the worker was killed: a timeout,
    and a worker lost, for each such answer. Its degree is read from the tree first."""
    import time

    start = time.monotonic()
    res = scorer.score("math", glm(pred), "(1, \\infty)")  # in a worker: a regression times out
    assert (res.reward, res.error) == (0.0, "parse"), res
    assert f"a condition of {degree} is too costly to solve" in res.detail
    assert time.monotonic() - start < 2.0


def test_a_ground_truth_too_costly_to_solve_is_matched_by_its_text_only():
    """As any unparsable truth: the answer is not at fault (no parse error), and the same
    text, or the same expression, still matches."""
    import time

    start = time.monotonic()
    res = V.verify("(1, \\infty)", "x^{50}+x > 3", {})
    assert (res.reward, res.error) == (0.0, None)
    assert res.detail.startswith("ground truth unparsable (a condition of degree 50")
    assert V.verify("x^{50} + x > 3", "x^{50}+x>3", {}).reward == 1.0
    assert V.verify("x^{50}+x>3", "x^{50}+x>3", {}).reward == 1.0
    assert time.monotonic() - start < 2.0


@pytest.mark.parametrize(
    ("pred", "gt"),
    [
        ("x^2 > 1", "(-\\infty,-1)\\cup(1,\\infty)"),
        ("x^2 - 3x + 2 < 0", "(1, 2)"),
        ("1 < x^2 < 4", "(-2,-1)\\cup(1,2)"),
        ("x^2 = 4 \\text{ or } x = 5", "\\{-2, 2, 5\\}"),
        ("\\{x \\mid x^2 - 1 > 0\\}", "(-\\infty,-1)\\cup(1,\\infty)"),
        # a binomial at once, whatever its degree
        ("x^3 > 8", "(2, \\infty)"),
        ("x^{50} > 3", "(-\\infty, -3^{1/50}) \\cup (3^{1/50}, \\infty)"),
        ("\\{x \\mid x^3 = 8\\}", "\\{2\\}"),
        # factors of degree 2 at most, 4 in all, as written or multiplied out
        ("(x-1)(x-2)(x-3) > 0", "(1,2)\\cup(3,\\infty)"),
        ("(x^2-1)(x^2-4) < 0", "(-2,-1)\\cup(1,2)"),
        ("x^3 - x > 0", "(-1, 0) \\cup (1, \\infty)"),
        ("x^3 - 6x^2 + 11x - 6 > 0", "(1,2)\\cup(3,\\infty)"),
        ("x^4 - 5x^2 + 4 < 0", "(-2,-1)\\cup(1,2)"),
        ("\\{x \\mid x^3 - 6x^2 + 11x - 6 = 0\\}", "\\{1, 2, 3\\}"),
        ("\\frac{x-1}{x+2} \\geq 0", "(-\\infty,-2)\\cup[1,\\infty)"),
        # radicals, absolute values and functions of a low degree
        ("\\sqrt{x+3} > 2", "(1, \\infty)"),
        ("|x - 1| + |x + 1| < 4", "(-2, 2)"),
        ("|x^2-4| < 3", "(-\\sqrt{7}, -1) \\cup (1, \\sqrt{7})"),
        ("\\log_2 x > 3", "(8, \\infty)"),
    ],
)
def test_conditions_of_a_low_degree_still_match_their_sets(pred, gt):
    assert V.verify(pred, gt, {}) == (1.0, None, None)
    assert V.verify(gt, pred, {}) == (1.0, None, None)


@pytest.mark.parametrize(
    ("pred", "gt", "error"),
    [
        ("\\sin x > 0", "(0, \\pi)", None),  # periodic: SymPy refuses at once, no set to match
        ("x^x > 2", "(2, \\infty)", None),  # SymPy gives up at once (a ConditionSet)
        ("\\{x \\mid \\sin x = 0\\}", "\\{0\\}", "parse"),  # set-builder: cannot solve it
    ],
)
def test_conditions_of_no_polynomial_pass_the_guard_and_fail_as_before(pred, gt, error):
    res = V.verify(pred, gt, {})
    assert (res.reward, res.error) == (0.0, error)
    assert "too costly" not in (res.detail or "")
