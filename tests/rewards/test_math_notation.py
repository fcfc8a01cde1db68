"""Math equivalence across the ways an answer is written: thousands separators, units in text
commands, a word's case, short answer words, products of powers, degrees on a trigonometric
argument, a name on the left of the answer, repeating decimals, conditions joined by "or" and
"and", set-builder notation, and ``\\log`` without a base."""

from __future__ import annotations

import pytest

from rewards.verifiers.math import MathVerifier

V = MathVerifier()


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
    from rewards.verifiers import math_text as mt

    assert mt.normalize("\\sin 30^\\circ") == "\\sin(\\frac{30\\pi}{180})"
    assert mt.normalize("\\sin x + 30^\\circ") == "\\sin x + 30"  # the sign on 30, not on x
    assert not mt.has_degrees("\\sin 30^\\circ") and mt.has_degrees("\\sin x + 30^\\circ")
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
    from rewards.verifiers import math_text as mt

    assert mt.normalize("\\overline{AB}") == "\\overline{AB}"  # a segment
    assert mt.normalize("\\overline{3}") == "\\overline{3}"  # no decimal point before it
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


@pytest.mark.parametrize(
    ("pred", "gt", "reward"),
    [
        # a short answer word was a product of its letters: Yes scored 0 against yes (Y is no y),
        # and sey scored 1 (y e s in another order)
        ("Yes", "yes", 1.0),
        ("YES", "yes", 1.0),
        ("yes", "\\text{Yes}", 1.0),
        ("No", "no", 1.0),
        ("\\text{No}", "\\text{no}", 1.0),
        ("Odd", "odd", 1.0),
        ("sey", "yes", 0.0),
        ("on", "no", 0.0),
        ("yes", "no", 0.0),
        # letters in a text-mode command are a word: \\text{on} matched \\text{no}
        ("\\text{on}", "\\text{no}", 0.0),
        ("\\text{der}", "\\text{red}", 0.0),
        ("ba", "\\text{ab}", 0.0),
        ("Red", "\\text{red}", 1.0),
        ("\\text{red}", "\\textbf{red}", 1.0),
        # two or three letters otherwise stay a product, and a capital another variable
        ("ba", "ab", 1.0),
        ("zyx", "xyz", 1.0),
        ("ba", "\\mathrm{ab}", 1.0),  # a math font: variables
        ("Ab", "ab", 0.0),
        ("ab", "AB", 0.0),
    ],
)
def test_short_answer_words_and_text_are_words_not_products(pred, gt, reward):
    assert V.verify(pred, gt, {}) == (reward, None, None)


def test_a_truth_in_text_mode_is_cached_apart_from_the_same_letters_in_math():
    assert V.cache_key("ba", "\\text{ab}", {}) != V.cache_key("ba", "ab", {})


@pytest.mark.parametrize(
    ("pred", "gt", "reward"),
    [
        # set-builder notation could not be parsed (a parse error), or was read as a set of
        # one odd element ({x : x > 2} as {x/x > 2})
        ("\\{x \\mid x > 2\\}", "x > 2", 1.0),
        ("\\{x \\mid x > 2\\}", "(2, \\infty)", 1.0),
        ("\\{x : x > 2\\}", "(2, \\infty)", 1.0),
        ("\\{x : x > 2\\}", "x > 2", 1.0),
        ("\\{x \\in \\mathbb{R} \\mid x>2\\}", "x > 2", 1.0),
        ("\\{x \\in \\mathbb{R} \\mid x>2\\}", "(2, \\infty)", 1.0),
        ("\\{x \\in \\mathbb R : x>2\\}", "(2, \\infty)", 1.0),
        ("\\{x | x > 2\\}", "(2, \\infty)", 1.0),
        ("\\left\\{x \\,\\middle|\\, x > 2\\right\\}", "(2, \\infty)", 1.0),
        ("\\{x \\colon x > 2\\}", "x > 2", 1.0),
        ("\\{t \\mid t > 2\\}", "x > 2", 1.0),  # the variable's name, as for x > 2 and t > 2
        ("(2, \\infty)", "\\{x \\mid x > 2\\}", 1.0),  # on the truth's side too
        ("x > 2", "\\{x \\mid x > 2\\}", 1.0),
        ("\\{x \\mid -3 < x \\leq 3\\}", "(-3, 3]", 1.0),
        ("\\{x \\mid x < -1 \\text{ or } x > 1\\}", "(-\\infty,-1)\\cup(1,\\infty)", 1.0),
        ("\\{x \\mid |x| > 2\\}", "(-\\infty,-2)\\cup(2,\\infty)", 1.0),
        ("\\{x \\mid x^2 = 4\\}", "\\{-2, 2\\}", 1.0),
        # another set stays wrong
        ("\\{x \\mid x > 3\\}", "x > 2", 0.0),
        ("\\{x \\mid x \\geq 2\\}", "(2, \\infty)", 0.0),
        ("\\{x \\mid x > 2\\}", "[2, \\infty)", 0.0),
        ("\\{x \\mid x < 2\\}", "x > 2", 0.0),
        ("\\{x \\mid x > 2\\}", "\\{2\\}", 0.0),
        ("\\{x \\mid x^2 = 4\\}", "\\{2\\}", 0.0),
        ("\\{x \\mid x < -1 \\text{ and } x > 1\\}", "(-\\infty,-1)\\cup(1,\\infty)", 0.0),
    ],
)
def test_set_builder_notation_is_the_set_its_condition_describes(pred, gt, reward):
    assert V.verify(pred, gt, {}) == (reward, None, None)


@pytest.mark.parametrize(
    ("pred", "gt"),
    [
        # not a set of reals in one variable: refused as unreadable, never matched
        ("\\{x \\in \\mathbb{Z} \\mid x > 2\\}", "x > 2"),  # the integers above 2
        ("\\{x \\in \\mathbb{N} \\mid x > 2\\}", "(2, \\infty)"),
        ("\\{x \\mid y > 2\\}", "x > 2"),  # the condition is on another variable
        ("\\{x \\mid x > 2 \\text{ and } y < 1\\}", "x > 2"),
        ("\\{x \\mid 5\\}", "5"),
        ("\\{x \\mid \\sin x = 0\\}", "\\{0\\}"),  # periodic: SymPy gives no set
    ],
)
def test_set_builder_notation_that_is_no_set_of_reals_is_a_parse_error(pred, gt):
    assert V.verify(pred, gt, {})[:2] == (0.0, "parse")


@pytest.mark.parametrize(
    ("pred", "gt", "reward"),
    [
        # \\log without a base was the natural log in the fast parser and base 10 in the
        # grammar (as latex2sympy2_extended, math-verify's parser, reads it): \\log 100 was not 2
        ("\\log 100", "2", 1.0),
        ("\\log(100)", "2", 1.0),
        ("\\log 1000", "3", 1.0),
        ("2", "\\log 100", 1.0),
        ("\\log 2 + \\log 5", "1", 1.0),
        ("\\log_{10} 100", "\\log 100", 1.0),
        ("\\log 8 / \\log 2", "3", 1.0),  # the base cancels
        ("\\log(xy)", "\\log x + \\log y", 1.0),
        # \\ln stays natural, \\log_b keeps its base
        ("\\ln 100", "2", 0.0),
        ("\\ln e^2", "2", 1.0),
        ("\\log_2 8", "3", 1.0),
        ("\\log_2 100", "2", 0.0),
        ("\\log_{e} 100", "\\ln 100", 1.0),
        ("\\log 100", "\\ln 100", 0.0),
        ("\\ln x", "\\log x", 0.0),
        ("\\frac{\\ln x}{\\ln 10}", "\\log x", 1.0),
        ("\\log 100", "4.605170186", 0.0),  # ln 100
    ],
)
def test_log_without_a_base_is_base_ten(pred, gt, reward):
    assert V.verify(pred, gt, {}) == (reward, None, None)


@pytest.mark.parametrize("text", ["\\log 100", "\\log(x)", "\\log x + 1", "\\ln 100", "\\ln(x)"])
def test_the_fast_parser_reads_log_as_the_grammar_does(text):
    from latex2sympy2_extended import latex2sympy

    from rewards.verifiers import latex_fast
    from rewards.verifiers.math import equal

    assert equal(latex_fast.parse(text), latex2sympy(text), 1e-9)


@pytest.mark.parametrize(
    ("pred", "gt", "reward"),
    [
        # \\log_e was a parse error: the grammar reads e as its constant, and has no rule for
        # it as a base (it reads \\log_{e})
        ("\\log_e 100", "\\ln 100", 1.0),
        ("\\log_e 100", "2", 0.0),
        ("\\log_e x", "\\ln x", 1.0),
        ("\\log_e e^{2}", "2", 1.0),
        ("\\log_{e} 100", "\\log_e 100", 1.0),
        ("\\log_2 8", "3", 1.0),
        ("\\log_2(8)", "3", 1.0),
        ("\\log _2 8", "3", 1.0),
        ("\\log_2 x", "\\frac{\\ln x}{\\ln 2}", 1.0),
        ("\\log_b x", "\\frac{\\ln x}{\\ln b}", 1.0),
        ("\\log_\\pi \\pi^{3}", "3", 1.0),
        ("\\log_{10}100", "2", 1.0),
        ("\\log_{10} 100", "2", 1.0),
        # an unbraced base is one number, all its digits, as x^23 is x^{23}, and as
        # latex2sympy2_extended (math-verify's parser) reads it: TeX would print log_1 0100
        ("\\log_10 100", "2", 1.0),
        ("\\log_10 100", "\\log_{10} 100", 1.0),
        ("2\\log_2 8", "6", 1.0),
    ],
)
def test_a_log_base_without_braces_is_one_letter_or_number(pred, gt, reward):
    assert V.verify(pred, gt, {}) == (reward, None, None)


@pytest.mark.parametrize(
    ("text", "normal"),
    [
        ("\\log_e 100", "\\log_{e} 100"),
        ("\\log_10 100", "\\log_{10} 100"),
        ("\\log _2x", "\\log_{2}x"),
        ("\\log_\\pi x", "\\log_{\\pi} x"),
        ("\\log_{10} 100", "\\log_{10} 100"),
        ("\\log_\\frac{1}{2} 8", "\\log_\\frac{1}{2} 8"),  # a command with arguments: as it is
    ],
)
def test_an_unbraced_log_base_is_braced_for_the_grammar(text, normal):
    from rewards.verifiers.math_text import normalize

    assert normalize(text) == normal
