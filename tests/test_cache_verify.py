from __future__ import annotations

import pytest

from proxy.cache.verify import features, jaccard, verify

NEAR_MISSES = [
    ("How do I reverse a list?", "How do I not reverse a list?", "negation"),
    ("How do I loop with an index?", "How do I loop without an index?", "negation"),
    ("How do I increase the font size?", "How do I decrease the font size?", "antonym"),
    ("Is the file readable?", "Is the file unreadable?", "antonym"),
    ("Convert JSON to YAML", "Convert YAML to JSON", "direction"),
    ("Is Rust faster than Go?", "Is Go faster than Rust?", "direction"),
    ("Replace tabs with spaces", "Replace spaces with tabs", "direction"),
    ("What happened in 1945?", "What happened in 1944?", "number"),
    ("Print the first three lines", "Print the first five lines", "number"),
    ("Wait 5 seconds", "Wait 5 minutes", "unit"),
    ('Check if s contains "hello"', 'Check if s contains "world"', "payload"),
    ("What does `git reset --hard` do?", "What does `git reset --soft` do?", "payload"),
    ("Filter rows where age > 30", "Filter rows where age < 30", "payload"),
    ("How do I sort a list in Python?", "How do I sort a list in JavaScript?", "entity"),
    ("Who is the CEO of Apple?", "Who is the CEO of Microsoft?", "entity"),
    ("How do I delete a file in Linux?", "How do I delete a directory in Linux?", "content"),
    ("How do I exit a for loop?", "How do I exit a while loop?", "content"),
]


@pytest.mark.parametrize(("a", "b", "reason"), NEAR_MISSES)
def test_near_misses_are_rejected_with_their_reason(a: str, b: str, reason: str) -> None:
    verdict = verify(a, b, 0.99, 0.8)
    assert (verdict.ok, verdict.reason) == (False, reason)


PARAPHRASES = [
    ("How do I reverse a list in Python?", "What's the way to reverse a Python list?"),
    ("What is the capital of France?", "What's the capital city of France?"),
    ("How do I remove duplicates from a list?", "How can I delete duplicate elements from a list?"),
    ("Who wrote Hamlet?", "Who is the author of Hamlet?"),
    ("How do I convert a string to an int in Python?", "How can I convert a string into an "
     "integer in Python?"),
]


@pytest.mark.parametrize(("a", "b"), PARAPHRASES)
def test_paraphrases_pass(a: str, b: str) -> None:
    assert verify(a, b, 0.9, 0.8).ok


def test_cosine_floor_comes_first() -> None:
    assert verify("a b", "a b c", 0.5, 0.8).reason == "below_threshold"
    assert verify("same", "same", 0.8, 0.8).ok


def test_features_and_jaccard() -> None:
    f = features("Convert 10 miles to km with `conv()` in Python")
    assert f.numbers["10"] == 1 and f.units == {"mile", "km"}
    assert f.literals == ["conv()"] and "python" in f.entities
    assert f.roles["km"] == "dst"
    assert jaccard({"a", "b"}, {"b", "c"}) == pytest.approx(1 / 3)
