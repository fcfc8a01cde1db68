"""Math equivalence: by value, not spelling; near misses stay wrong. What the verifier refuses
(oversized, pathological or incomparable answers, ground truths that are no answer) is in
test_math_guards.py."""

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
    ("pred", "gt"),
    [("A or B", "A"), ("A B C D", "A"), ("(A) (B)", "(A)"), ("A:B", "A"), ("B. C. D.", "B"),
     ("\\text{A or B}", "A")],
)  # fmt: skip
def test_a_choice_answer_naming_several_letters_is_wrong(pred, gt):
    """A hedge used to be scored by its first letter: "A or B" got full reward when A was right."""
    assert V.verify(pred, gt, {}).reward == 0.0
    assert V.verify("(" + gt.strip("()") + ") 42", gt, {}).reward == 1.0  # a letter, its content


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


@pytest.mark.parametrize(
    ("pred", "gt", "reward"),
    [
        # a scale word was dropped as a unit: 5 million scored 1 against 5, 0 against 5000000
        ("5 million", "5000000", 1.0),
        ("5 million", "5", 0.0),
        ("2.5 thousand", "2500", 1.0),
        ("1.5 billion", "1.5 \\times 10^{9}", 1.0),
        ("3 hundred", "300", 1.0),
        ("5000000", "5 million", 1.0),
        ("5 millions", "5 million", 1.0),
        ("2.5 million", "2.5", 0.0),
        ("5 cm", "5", 1.0),  # a unit is still dropped
        # a lone x, y or z after a number is a variable, not a unit
        ("3 x", "3", 0.0),
        ("2 y", "2y", 1.0),
    ],
)
def test_scale_words_multiply_and_a_variable_is_no_unit(pred, gt, reward):
    assert V.verify(pred, gt, {}) == (reward, None, None)


@pytest.mark.parametrize(
    ("pred", "gt", "reward"),
    [
        # with i as a variable these were all wrong
        ("\\frac{1}{1+i}", "\\frac{1-i}{2}", 1.0),
        ("(3+4i)(3-4i)", "25", 1.0),
        ("i^2", "-1", 1.0),
        ("\\sqrt{-1}", "i", 1.0),
        ("e^{i\\pi}", "-1", 1.0),
        ("\\frac1i", "-i", 1.0),  # TeX's one-token arguments: \\frac1i is \\frac{1}{i}
        ("3+4i", "4i+3", 1.0),
        ("x+i", "i+x", 1.0),
        ("-i", "i", 0.0),
        ("1+i", "1-i", 0.0),
        ("2i", "2j", 0.0),
        ("\\frac{1}{i^2+1}", "1", 0.0),  # undefined as a complex number: wrong, not an error
    ],
)
def test_i_is_the_imaginary_unit_when_that_makes_answers_equal(pred, gt, reward):
    assert V.verify(pred, gt, {}) == (reward, None, None)


@pytest.mark.parametrize(
    ("pred", "gt", "reward"),
    [
        # an angle in degrees against one in radians was wrong either way round
        ("30^\\circ", "\\frac{\\pi}{6}", 1.0),
        ("\\frac{\\pi}{6}", "30^\\circ", 1.0),
        ("45°", "\\pi/4", 1.0),
        ("pi/4", "45^{\\circ}", 1.0),
        ("120\\degree", "\\frac{2\\pi}{3}", 1.0),
        ("60^\\circ", "\\frac{\\pi}{6}", 0.0),
        # with no degree sign a number is no angle in degrees: 30 radians is not pi/6
        ("30", "\\frac{\\pi}{6}", 0.0),
        ("\\frac{\\pi}{6}", "30", 0.0),
        ("30\\degree", "30", 1.0),  # the sign alone is still dropped
        # several angles, value by value: any order, brackets or a set, named, plus whole turns
        ("30^\\circ, 150^\\circ", "\\frac{\\pi}{6}, \\frac{5\\pi}{6}", 1.0),
        ("\\frac{5\\pi}{6}, \\frac{\\pi}{6}", "30^\\circ, 150^\\circ", 1.0),
        ("(30^\\circ, 150^\\circ)", "(\\frac{\\pi}{6}, \\frac{5\\pi}{6})", 1.0),
        ("\\{30^\\circ, 150^\\circ\\}", "\\frac{\\pi}{6}, \\frac{5\\pi}{6}", 1.0),
        ("\\theta = 30^\\circ", "\\frac{\\pi}{6}", 1.0),
        ("\\theta = 30^\\circ, 150^\\circ", "\\frac{\\pi}{6}, \\frac{5\\pi}{6}", 1.0),
        ("30^\\circ + 360^\\circ k", "\\frac{\\pi}{6} + 2k\\pi", 1.0),
        ("30^\\circ, 160^\\circ", "\\frac{\\pi}{6}, \\frac{5\\pi}{6}", 0.0),
        ("30^\\circ", "\\frac{\\pi}{6}, \\frac{5\\pi}{6}", 0.0),
        ("30, 150", "\\frac{\\pi}{6}, \\frac{5\\pi}{6}", 0.0),
    ],
)
def test_degrees_match_radians_only_where_a_degree_sign_says_so(pred, gt, reward):
    assert V.verify(pred, gt, {}) == (reward, None, None)


def test_degrees_are_read_in_radians_value_by_value():
    from rewards.verifiers.math import degrees_to_radians

    assert degrees_to_radians("(30) + (150)") == "\\frac{((30) + (150))\\pi}{180}"  # one value
    assert degrees_to_radians("x = 30, y = 150") == (
        "x = \\frac{(30)\\pi}{180}, y = \\frac{(150)\\pi}{180}"
    )
    assert degrees_to_radians("[30, f(1, 2)]") == (
        "[\\frac{(30)\\pi}{180}, \\frac{(f(1, 2))\\pi}{180}]"
    )


def test_a_degree_sign_keeps_its_own_cache_entry():
    # 30 degrees is pi/6 and 30 is not: the two may not share a remembered verdict
    assert V.cache_key("30^\\circ", "\\pi/6", {}) != V.cache_key("30", "\\pi/6", {})


@pytest.mark.parametrize(
    ("pred", "gt", "reward"),
    [
        # a number in words was read as a product of letters, and wrong
        ("\\text{five}", "5", 1.0),
        ("5", "\\text{five}", 1.0),
        ("Twenty-one", "21", 1.0),
        ("ninety nine", "99", 1.0),
        ("five million", "5000000", 1.0),  # then a scale word, or a unit
        ("three cm", "3", 1.0),
        ("four", "5", 0.0),
        ("fivefold", "5", 0.0),  # only a whole word
        ("one-half", "1", 0.0),  # nor the start of another
    ],
)
def test_a_number_in_words_is_that_number(pred, gt, reward):
    assert V.verify(pred, gt, {}) == (reward, None, None)
