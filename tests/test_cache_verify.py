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


@pytest.mark.parametrize(("a", "b"), [
    ("how do i reverse a list in python", "How do I reverse a list in python?"),
    ("What  is a  monad ?", "what is a monad"),
    ("What is the capital of france?", "what is the capital of france"),
    ("ｗｈａｔ ｉｓ ｄｎｓ？", "what is dns"),  # full-width forms
    ("Tell me a joke. make it short", "tell me a joke. Make it short."),
    ("Is it safe?!", "is it safe"),
])
def test_the_same_question_written_otherwise(a: str, b: str) -> None:
    assert same_question(a, b) and same_question(b, a)


# a review (2026-11-28) of the first rule (whole-text case folding, NFKC, any end punctuation)
NOT_THE_SAME = [
    ("Who is the head of IT?", "Who is the head of it?"),
    ("What does US stand for?", "What does us stand for?"),
    ("What is Polish?", "What is polish?"), ("Polish is hard", "polish is hard"),
    ("How big is Turkey?", "How big is turkey?"),
    ("Is Hf dangerous?", "Is HF dangerous?"), ("Is Co toxic?", "Is CO toxic?"),
    ("What is the value of G?", "What is the value of g?"),
    ("What does σ mean in statistics?", "What does Σ mean in statistics?"),
    ("How many watts is 1 mW?", "How many watts is 1 MW?"),
    ("Convert MBps to Mbps", "Convert Mbps to MBps"),
    ("git checkout Main", "git checkout main"),
    ("What does ssh -X do?", "What does ssh -x do?"),
    ("What does %M mean in strftime?", "What does %m mean in strftime?"),
    ("What is in /etc/Hosts?", "What is in /etc/hosts?"),
    ("Decode the base64 aGVsbG8", "Decode the base64 AGVSBG8"),
    ("Is Password123 a strong password?", "Is password123 a strong password?"),
    ("Was bedeutet Maße?", "Was bedeutet Masse?"),
    ("What is 0!?", "What is 0?"), ("Compute 10!", "Compute 10"),
    ("Explain: git add .", "Explain: git add"),
    ("Sum 2ⁿ for n from 0 to 10", "Sum 2n for n from 0 to 10"),
    ("What is the derivative of x²?", "What is the derivative of x2?"),
    ('How many bytes is "ﬁ" in UTF-8?', 'How many bytes is "fi" in UTF-8?'),
    ("What is ⅻ?", "What is xii?"),
    ("What does this print:\nx = 0\nfor i in range(3):\n    x += 1\nprint(x)",
     "What does this print:\nx = 0\nfor i in range(3):\n    x += 1\n    print(x)"),
    ('What is len("a  b")?', 'What is len("a b")?'),
    ("How do I reverse a list?", "How do I reverse a list in Python?"),
    ("Convert JSON to YAML", "Convert YAML to JSON"),
    # a probe (session 23): code kept its meaning only up to its ends and a final "."
    ("import numpy as np\nnp", "import numpy as np\nnp."),
    ("user = get_user()\nuser", "user = get_user()\nuser."),
    ("def fib(n):\n", "def fib(n):\n    "), ("x = [1, 2,", "  x = [1, 2,"),
    ("<div>", "<div>\n  "), ("Q: name a color\nA:", "Q: name a color\nA: "),
    ("def add(a, b):\n    return", "def add(a, b):\n    return "),
    ("What does f(x) return?", "What does f(x) return"),
    # and an opening acronym is a name, not a question word
    ("WHO says masks work", "who says masks work"), ("CAN bus protocol?", "can bus protocol?"),
    ("IS curve in macroeconomics", "is curve in macroeconomics"),
]


@pytest.mark.parametrize(("a", "b"), NOT_THE_SAME)
def test_what_only_looks_the_same_is_left_to_the_judge(a: str, b: str) -> None:
    assert not same_question(a, b) and not same_question(b, a)
