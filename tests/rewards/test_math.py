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


@pytest.mark.parametrize(
    ("pred", "gt", "reward"),
    [
        # a number with thousands separators against a side that is not a plain number went to
        # the grammar, which read 1,000 as the list 1, 0: right answers scored 0, and a list of
        # its digits scored 1
        ("1,000,000", "10^6", 1.0),
        ("1,024", "2^{10}", 1.0),
        ("2^{10}", "1,024", 1.0),
        ("-1,000", "-10^{3}", 1.0),
        ("1,000 \\text{ m}", "10^3", 1.0),
        ("0, 1", "1,000", 0.0),
        ("\\{1, 0\\}", "1,000", 0.0),
        ("1,000", "\\{0, 1\\}", 0.0),
        ("1,5", "1.5", 0.0),  # no thousands: a list stays a list
        ("1, 2", "2, 1", 1.0),
    ],
)
def test_thousands_separators_are_read_as_one_number_by_the_parser_too(pred, gt, reward):
    assert V.verify(pred, gt, {}).reward == reward


@pytest.mark.parametrize(
    ("pred", "gt", "reward"),
    [
        # a unit written as TeX commonly writes it was kept, and the answer read as a product
        ("7 \\mathrm{~cm}", "7", 1.0),  # a tie before the unit
        ("7\\mathrm{~cm}^{2}", "7", 1.0),
        ("12\\,\\mathrm{cm^2}", "12", 1.0),  # the power inside the braces
        ("5 \\text{ m/s}", "5", 1.0),
        ("60 \\text{km/h}", "60", 1.0),
        ("2 \\text{ m}^{-1}", "2", 1.0),
        ("6 \\text{ m/s}", "5", 0.0),
        # a scale word in \text{} was dropped as a unit: 2.5 \text{ million} scored 1 against
        # 2.5 and 0 against 2500000, the other way round from 2.5 million
        ("2.5 \\text{ million}", "2500000", 1.0),
        ("2.5 \\text{ million}", "2.5", 0.0),
        ("3\\mathrm{~thousand}", "3000", 1.0),
        ("3000", "3 \\text{ thousand}", 1.0),
        ("3", "3 \\text{ thousand}", 0.0),
    ],
)
def test_units_in_text_commands_are_dropped_and_scale_words_multiply(pred, gt, reward):
    assert V.verify(pred, gt, {}).reward == reward


@pytest.mark.parametrize(
    ("pred", "gt", "reward"),
    [
        # a word was compared case and all: "No solution" scored 0 against "no solution"
        ("No solution", "\\text{no solution}", 1.0),
        ("\\text{devon}", "Devon", 1.0),
        ("MONDAY", "Monday", 1.0),
        ("\\text{Mondya}", "monday", 0.0),
        # a name in capitals keeps its case
        ("abc", "ABC", 0.0),
        ("\\angle abc", "\\angle ABC", 0.0),
        ("ab", "AB", 0.0),
    ],
)
def test_a_word_is_compared_case_aside_and_a_name_in_capitals_with_its_case(pred, gt, reward):
    assert V.verify(pred, gt, {}) == (reward, None, None)


@pytest.mark.parametrize(
    ("pred", "gt", "reward"),
    [
        # x^2y^2 was refused as a double superscript, as if it were x^(2y)^2: a parse error
        # for the answer, an unparsable truth matched by its text only
        ("x^2y^2", "(xy)^2", 1.0),
        ("(xy)^2", "x^2y^2", 1.0),
        ("4x^2y^2", "(2xy)^2", 1.0),
        ("a^2b^3c", "c a^2 b^3", 1.0),
        ("x^10y^2", "y^2x^{10}", 1.0),
        ("x^2y^2", "x^2y^3", 0.0),
        # Euler's number written upright was a variable named e
        ("\\mathrm{e}^2", "e^2", 1.0),
        ("\\frac{1}{\\mathrm{e}}", "e^{-1}", 1.0),
        ("\\mathrm{e}", "2.718281828", 1.0),
    ],
)
def test_a_product_of_powers_is_no_double_superscript_and_upright_e_is_e(pred, gt, reward):
    assert V.verify(pred, gt, {}) == (reward, None, None)


@pytest.mark.parametrize(
    ("pred", "gt", "reward"),
    [
        # the degree sign on a trigonometric function's argument was dropped: sin 30 radians
        ("\\sin 30^\\circ", "\\frac{1}{2}", 1.0),
        ("\\cos 60°", "1/2", 1.0),
        ("\\sin(30^\\circ)", "0.5", 1.0),
        ("\\cos\\left(60^{\\circ}\\right)", "\\frac12", 1.0),
        ("\\tan 45\\degree", "1", 1.0),
        ("\\sec 60^\\circ", "2", 1.0),  # through the grammar, which the fast parser leaves it to
        ("\\frac{\\sqrt{3}}{2}", "\\cos 30^\\circ", 1.0),
        ("2\\sin 45^\\circ", "\\sqrt{2}", 1.0),
        ("\\sin^2 30^\\circ + \\cos^{2}(30^\\circ)", "1", 1.0),
        ("\\cos(90^\\circ - 30^\\circ)", "\\frac{1}{2}", 1.0),  # each number in the argument
        ("\\sin 30^\\circ", "\\sin\\frac{\\pi}{6}", 1.0),
        # a bare angle stays its number of degrees
        ("30^\\circ", "30", 1.0),
        ("30", "30^\\circ", 1.0),
        # without the sign the argument is in radians, and it is no angle in degrees
        ("\\sin 30", "\\frac{1}{2}", 0.0),
        ("\\sin 30", "\\sin 30^\\circ", 0.0),  # was 1: both signs dropped
        ("\\sin 30^\\circ", "\\frac{\\pi}{6}", 0.0),
        ("\\cos 60^\\circ", "\\frac{\\sqrt{3}}{2}", 0.0),
    ],
)
def test_a_degree_sign_on_a_trigonometric_argument_is_read_in_radians(pred, gt, reward):
    assert V.verify(pred, gt, {}) == (reward, None, None)


def test_a_trigonometric_argument_in_degrees_is_normalised_to_radians():
    from rewards.verifiers import math_parse as mp

    assert mp.normalize("\\sin 30^\\circ") == "\\sin(\\frac{30\\pi}{180})"
    assert mp.normalize("\\sin x + 30^\\circ") == "\\sin x + 30"  # the sign on 30, not on x
    assert not mp.has_degrees("\\sin 30^\\circ") and mp.has_degrees("\\sin x + 30^\\circ")
    assert V.cache_key("\\sin 30^\\circ", "0.5", {}) != V.cache_key("\\sin 30", "0.5", {})


@pytest.mark.parametrize(
    ("pred", "gt", "reward"),
    [
        # only a plain variable on the left was dropped: f(x) = x^2 scored 0 against x^2
        ("f(x) = x^2", "x^2", 1.0),
        ("x^2", "f(x) = x^2", 1.0),
        ("g(t) = t^2 + 1", "1 + t^2", 1.0),
        ("f(x, y) = x + y", "y + x", 1.0),
        ("f(x) = x^2", "y = x^2", 1.0),  # one function, two names
        ("y = 2x + 1", "f(x) = 2x + 1", 1.0),
        ("f(x) = x^2", "x^3", 0.0),
        ("f(x) = x^2", "y = x^3", 0.0),
        ("f(x) = 3", "x = 3", 0.0),  # x = 3 is a value of x, not the function
        # equations that are the answer stay equations
        ("x^2 + y^2 = 1", "y^2 + x^2 = 1", 1.0),
        ("x^2 + y^2 = 1", "1", 0.0),
        ("1", "x^2 + y^2 = 1", 0.0),
        ("x + y = 1", "1", 0.0),
        # the name of an angle
        ("\\angle A = 30^\\circ", "30", 1.0),
        ("30", "\\angle A = 30^\\circ", 1.0),
        ("m\\angle ABC = 45", "45", 1.0),
        ("\\angle A = 30^\\circ", "\\frac{\\pi}{6}", 1.0),
        ("\\angle A = 30^\\circ, \\angle B = 60^\\circ", "30, 60", 1.0),
        ("\\angle A = 31^\\circ", "30", 0.0),
        ("\\angle A = 30", "\\angle B = 30", 0.0),
        ("\\angle A = 30", "\\angle A = 30^\\circ", 1.0),
    ],
)
def test_a_name_on_the_left_of_the_answer_is_no_part_of_it(pred, gt, reward):
    assert V.verify(pred, gt, {}) == (reward, None, None)


@pytest.mark.parametrize(
    ("pred", "gt", "reward"),
    [
        # \overline{3} after a decimal point could not be parsed on either side
        ("0.\\overline{3}", "\\frac{1}{3}", 1.0),
        ("\\frac13", "0.\\overline{3}", 1.0),
        ("0.1\\overline{6}", "1/6", 1.0),
        ("0.\\overline{142857}", "\\frac{1}{7}", 1.0),
        ("2.\\overline{45}", "27/11", 1.0),
        ("1.2\\overline{45}", "\\frac{137}{110}", 1.0),
        (".\\overline{6}", "2/3", 1.0),
        ("0.\\overline{9}", "1", 1.0),
        ("-0.\\overline{3}", "-\\frac{1}{3}", 1.0),
        ("x + 0.\\overline{3}", "x + \\frac{1}{3}", 1.0),
        ("0.\\overline{3}", "0.333", 0.0),  # the bar is no rounding
        ("0.\\overline{3}", "0.3", 0.0),
        ("0.\\overline{6}", "\\frac{1}{3}", 0.0),
        ("0.1\\overline{6}", "0.16", 0.0),
    ],
)
def test_a_bar_over_digits_after_the_point_is_a_repeating_decimal(pred, gt, reward):
    assert V.verify(pred, gt, {}) == (reward, None, None)


def test_a_bar_over_anything_else_is_left_as_written():
    from rewards.verifiers import math_parse as mp

    assert mp.normalize("\\overline{AB}") == "\\overline{AB}"  # a segment
    assert mp.normalize("\\overline{3}") == "\\overline{3}"  # no decimal point before it
    assert V.verify("\\overline{AB}", "\\overline{AB}", {}) == (1.0, None, None)


@pytest.mark.parametrize(
    ("pred", "gt", "reward"),
    [
        # "or" between inequalities: the grammar read it as a comma, a list of inequalities
        # that matched no union of intervals, and matched the same list joined by "and"
        ("x<-1 \\text{ or } x>1", "(-\\infty,-1)\\cup(1,\\infty)", 1.0),
        ("(-\\infty,-1)\\cup(1,\\infty)", "x<-1 \\text{ or } x>1", 1.0),
        ("x>1 \\text{ or } x<-1", "(1, \\infty) \\cup (-\\infty, -1)", 1.0),
        ("x \\le -1 \\text{ or } x \\ge 1", "(-\\infty,-1]\\cup[1,\\infty)", 1.0),
        ("x<-1 \\lor x>1", "(-\\infty,-1)\\cup(1,\\infty)", 1.0),
        ("x<-1 \\quad\\text{or}\\quad x>1", "(-\\infty,-1)\\cup(1,\\infty)", 1.0),
        ("t<-1 \\text{ or } t>1", "x<-1 \\text{ or } x>1", 1.0),
        ("-3<x<-1 \\text{ or } x>1", "(-3,-1)\\cup(1,\\infty)", 1.0),
        ("x<-1 \\text{ or } x=2", "(-\\infty,-1)\\cup\\{2\\}", 1.0),
        ("x=2 \\text{ or } x=3", "2, 3", 1.0),
        ("x^2>1", "x<-1 \\text{ or } x>1", 1.0),
        ("x<1 \\text{ or } x \\geq 1", "(-\\infty, \\infty)", 1.0),
        ("x>-1 \\text{ and } x<1", "(-1,1)", 1.0),
        ("x>-1 \\text{ and } x \\le 1", "-1<x \\le 1", 1.0),
        ("x<-1 \\text{ and } x>1", "\\emptyset", 1.0),
        # open and closed ends, other ends, "and" for "or" and the other way round stay wrong
        ("x \\le -1 \\text{ or } x \\ge 1", "(-\\infty,-1)\\cup(1,\\infty)", 0.0),
        ("x<-1 \\text{ or } x>2", "(-\\infty,-1)\\cup(1,\\infty)", 0.0),
        ("x<-1 \\text{ and } x>1", "(-\\infty,-1)\\cup(1,\\infty)", 0.0),
        ("x<-1 \\text{ and } x>1", "x<-1 \\text{ or } x>1", 0.0),  # was 1
        ("x>-1 \\text{ and } x<1", "x<1 \\text{ or } x>-1", 0.0),  # was 1
        ("x<-1 \\text{ or } y>1", "(-\\infty,-1)\\cup(1,\\infty)", 0.0),  # two variables
        ("x=2 \\text{ or } x=3", "2, 4", 0.0),
        # what is no pair of conditions in one variable is read as before, as a list
        ("x=2 \\text{ and } x=3", "2, 3", 1.0),  # a list of solutions, as it is often written
        ("3 \\text{ or } 4", "3, 4", 1.0),
    ],
)
def test_inequalities_joined_by_or_and_and_are_unions_and_intersections(pred, gt, reward):
    assert V.verify(pred, gt, {}) == (reward, None, None)
