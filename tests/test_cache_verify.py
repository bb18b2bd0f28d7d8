from __future__ import annotations

import pytest

from proxy.cache.verify import check, facts, same_question

REJECTED = [
    ("What happened in 1945?", "What happened in 1944?", "number"),
    ("Print the first three lines", "Print the first five lines", "number"),
    ("How many euros is 100 dollars?", "How many euros is 1,000 dollars?", "number"),
    ("Who was the second person on the moon?", "Who was the third person on the moon?",
     "number"),
    # found by a review (the judge let the first through at a 10 % bound)
    ("Who was the sixteenth president of the USA?", "Who was the seventeenth president of "
     "the USA?", "number"),
    ("What is the twentieth amendment?", "What is the thirtieth amendment?", "number"),
    ("Is -5 °C below freezing?", "Is 5 °C below freezing?", "number"),
    ("Is −5 °C below freezing?", "Is 5 °C below freezing?", "number"),
    ("What happened in May 1990?", "What happened in 1990?", "date"),
    ("What happened in June 1990?", "What happened in July 1990?", "date"),
    ("How do I reverse a list?", "How do I not reverse a list?", "negation"),
    ("Why can't I log in?", "Why can I log in?", "negation"),
]


@pytest.mark.parametrize(("a", "b", "reason"), REJECTED)
def test_rules_reject_with_their_reason(a: str, b: str, reason: str) -> None:
    assert check(a, b).reason == reason
    assert check(b, a).reason == reason


LEFT_TO_THE_JUDGE = [
    ("What's a hundred bucks in euros?", "Convert 100 USD to EUR"),
    ("200k dollars at 3.5 percent over thirty years", "$200,000 at 3.5% for 30 years"),
    ("may 1990 - what went on?", "What happened in May 1990?"),
    ("May I ask how to sort a list?", "how do I sort a list"),  # a modal, not a month
    ("How do I turn on 2FA?", "How do I enable two-factor auth?"),
    ("How many calories in one banana?", "calories in a banana"),  # "one" is an article
    ("Convert JSON to YAML", "Convert YAML to JSON"),  # direction: the judge's call
    ("pages 2-5 of the report", "pages 2-5 of the report, please"),  # a range, not -5
    ("Is −5 °C cold?", "is -5 degrees C cold"),  # either minus sign
    ("How big is Texas in km²?", "size of texas in square km"),  # a unit, not an exponent
]


@pytest.mark.parametrize(("a", "b"), LEFT_TO_THE_JUDGE)
def test_rules_let_these_through(a: str, b: str) -> None:
    assert check(a, b).ok


def test_facts() -> None:
    f = facts("Did k8s ship 2 releases in March 2020? It didn't, never")
    assert dict(f.numbers) == {"2": 1, "2020": 1}  # k8s is a name, not a number
    assert dict(f.months) == {"march": 1}
    assert f.negations == 2
    assert dict(facts("Two hundred and 10k and 3.50").numbers) == {"200": 1, "10000": 1,
                                                                    "3.5": 1}


@pytest.mark.parametrize(("a", "b", "same"), [
    ("How do I reverse a list in Python?", "how do i reverse a list in python", True),
    ("What is  the capital of France ?", "What is the capital of France", True),
    ("Is it safe?!", "is it safe.", True),
    ("ｗｈａｔ ｉｓ ｄｎｓ？", "what is dns", True),  # full-width forms (NFKC)
    ("what does print(X) do", "what does print(x) do", False),  # code: case may be a name's
    ("set A_B = 1", "set a_b = 1", False),
    ("What does print(X) do", "what does print(X) do", False),  # code: even its first letter
    ("How do I reverse a list?", "How do I reverse a list in Python?", False),
    ("Convert JSON to YAML", "Convert YAML to JSON", False),
    ("what is dns", "what is dns?", True),
])
def test_the_same_question_written_otherwise(a: str, b: str, same: bool) -> None:
    assert same_question(a, b) is same and same_question(b, a) is same
