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
    assert V.verify("100.501", "100.5", {}).reward == 0.0
    assert V.verify("100.50001", "100.5", {}).reward == 1.0


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


def test_an_integer_truth_needs_an_equal_value_while_other_truths_keep_the_tolerance():
    assert V.verify("1000001", "1000000", {}).reward == 0.0
    assert V.verify("123456789", "123456788", {}).reward == 0.0
    assert V.verify("2^{20} + 1", "1048576", {}).reward == 0.0
    # a decimal within rel_tol of an integer truth used to score 1
    assert V.verify("12345670.5", "12345678", {}) == (0.0, None, None)
    assert V.verify("1000000.0000001", "1000000", {}) == (0.0, None, None)
    assert V.verify("2 \\cdot 6172835.25", "12345671", {}) == (0.0, None, None)
    assert V.verify("49.9999999%", "50%", {}) == (0.0, None, None)
    assert V.verify("1000000.0", "1000000", {}) == (1.0, None, None)
    assert V.verify("0.5", "50%", {}) == (1.0, None, None)
    assert V.verify("\\log_2 8", "3", {}) == (1.0, None, None)  # not a decimal: evaluated
    assert V.verify("3.1415927", "\\pi", {}).reward == 1.0
    assert V.verify("0.3333333", "\\frac{1}{3}", {}).reward == 1.0


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


COLUMN = "\\begin{pmatrix}1\\\\2\\end{pmatrix}"


@pytest.mark.parametrize(
    ("pred", "gt", "reward"),
    [
        # a scalar against a matrix raised TypeError (SymPy cannot subtract them)
        ("5", COLUMN, 0.0),
        (COLUMN, "5", 0.0),
        ("x", COLUMN, 0.0),
        ("\\begin{pmatrix}5\\end{pmatrix}", "5", 0.0),
        # a tuple is the vector it names, as a column or a row
        ("(1,2)", COLUMN, 1.0),
        (COLUMN, "(1, 2)", 1.0),
        ("(2,1)", "\\begin{pmatrix}2\\\\1\\end{pmatrix}", 1.0),
        ("(1,2,3)", "\\begin{pmatrix}1\\\\2\\\\3\\end{pmatrix}", 1.0),
        ("(1,2)", "\\begin{pmatrix}1 & 2\\end{pmatrix}", 1.0),
        ("(2,1)", COLUMN, 0.0),
        ("(1,3,2)", "\\begin{pmatrix}1\\\\2\\\\3\\end{pmatrix}", 0.0),
        ("[1,2]", COLUMN, 0.0),  # a closed interval
        ("\\{1,2\\}", COLUMN, 0.0),
        ("(1,2)", "\\begin{pmatrix}1 & 2\\\\ 3 & 4\\end{pmatrix}", 0.0),
        ("\\begin{pmatrix}1 & 2\\end{pmatrix}", COLUMN, 0.0),  # a row is not a column
    ],
)
def test_a_matrix_against_a_scalar_is_wrong_and_a_tuple_matches_its_vector(pred, gt, reward):
    assert V.verify(pred, gt, {}) == (reward, None, None)


def test_a_scalar_against_a_matrix_is_scored_in_the_pool_not_a_verifier_error(scorer):
    res = scorer.score("math", glm("5"), COLUMN)
    assert (res.reward, res.error) == (0.0, None)


@pytest.mark.parametrize(
    ("pred", "gt", "reward"),
    [("(3,1)", "(2,1)", 0.0), ("(1,1)", "(2,2)", 0.0), ("[2,1]", "[3,1]", 0.0),
     ("(2,1)", "(2, 1)", 1.0), ("(1,1)", "(1,1.0)", 1.0)],
)  # fmt: skip
def test_a_pair_that_would_be_an_empty_interval_is_a_pair(pred, gt, reward):
    """The fast parser read (3, 1) as the empty interval, equal to every other such pair."""
    assert V.verify(pred, gt, {}) == (reward, None, None)


@pytest.mark.parametrize(
    ("pred", "gt", "reward"),
    [("\\gcd(12,18)", "6", 1.0), ("\\operatorname{lcm}(4,6)", "12", 1.0),
     ("\\gcd(12,18)", "3", 0.0), ("\\operatorname{lcm}(4,6)", "24", 0.0),
     ("2\\gcd(12,18)", "12", 1.0)],
)  # fmt: skip
def test_gcd_and_lcm_are_evaluated(pred, gt, reward):
    """They raised ValueError (an unevaluated gcd cannot be compared): a verifier error."""
    assert V.verify(pred, gt, {}) == (reward, None, None)


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


def test_small_matrices_of_zeros_ones_and_the_identity_are_read():
    assert V.verify("\\operatorname{zeros}(2,1)", "\\begin{pmatrix}0\\\\0\\end{pmatrix}", {}) == (
        1.0,
        None,
        None,
    )
    identity = "\\begin{pmatrix}1 & 0\\\\ 0 & 1\\end{pmatrix}"
    assert V.verify("\\operatorname{eye}(2)", identity, {}) == (1.0, None, None)
    assert V.verify("\\operatorname{ones}(2)", identity, {}) == (0.0, None, None)


@pytest.mark.parametrize(
    ("pred", "gt", "reward"),
    [
        # the fifth symbol took the first one's value at every probe point: all scored 1
        ("a - f + b c d", "b c d", 0.0),
        ("x_1+2x_2+3x_3+4x_4+5x_5", "5x_1+2x_2+3x_3+4x_4+x_5", 0.0),
        ("a^2 b c d f", "a b c d f^2", 0.0),
        ("x_1 + x_3", "2x_2", 0.0),
        ("(a+b)(c+d)+f g", "ac+ad+bc+bd+gf", 1.0),
        ("x_1 x_2 x_3 x_4 x_5 x_6", "x_6 x_5 x_4 x_3 x_2 x_1", 1.0),
        ("\\frac{a^2-f^2}{a-f} + b c d", "a + f + d c b", 1.0),
    ],
)
def test_identities_in_many_variables_give_each_variable_its_own_probe_value(pred, gt, reward):
    assert V.verify(pred, gt, {}) == (reward, None, None)


@pytest.mark.parametrize(
    ("pred", "gt", "reward"),
    [
        # letters read as a product of variables matched any anagram
        ("\\text{Mondya}", "\\text{Monday}", 0.0),
        ("BAC", "ABC", 0.0),
        ("\\angle BAC", "\\angle ABC", 0.0),
        ("\\text{solution no}", "\\text{no solution}", 0.0),
        ("C B A", "ABC", 0.0),
        ("\\text{none}", "\\text{neon}", 0.0),
        ("\\text{Monday}", "Monday", 1.0),
        ("\\textbf{Monday}", "\\text{Monday}", 1.0),
        ("A B C", "ABC", 1.0),  # spaces between letters are no part of the word
        ("\\angle ABC", "\\angle ABC", 1.0),
        # products with other signs, and two or three small letters, are algebra, as before
        ("2ba", "2ab", 1.0),
        ("ba", "ab", 1.0),
        ("zyx", "xyz", 1.0),
        ("b \\cdot a", "ab", 1.0),
        ("r \\pi", "pi r", 1.0),
        ("\\infty", "infinity", 1.0),
        ("infinity", "inf", 1.0),
    ],
)
def test_a_word_is_compared_letter_for_letter_not_as_a_product(pred, gt, reward):
    assert V.verify(pred, gt, {}) == (reward, None, None)


@pytest.mark.parametrize(
    ("pred", "gt", "reward"),
    [
        # capitals in an option's text were read as more choice letters: a hedge, scored 0
        ("(B) I and III", "B", 1.0),
        ("(A) 5 J", "A", 1.0),
        ("\\text{(B) I and III}", "(B)", 1.0),
        ("(b)", "B", 1.0),
        ("(b) 42", "(B)", 1.0),
        ("(C) I and III", "B", 0.0),
        ("(B) I and (C)", "B", 0.0),  # a second parenthesised letter is a hedge
        ("(b) or (c)", "B", 0.0),
        ("b", "B", 0.0),  # a bare lower-case letter is a variable
    ],
)
def test_a_parenthesised_option_letter_is_the_choice(pred, gt, reward):
    assert V.verify(pred, gt, {}) == (reward, None, None)
