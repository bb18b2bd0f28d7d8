"""The generator's fixes from the dev label audit (docs/cache.md, "The labelled pairs"): each test
fails on the generator before them."""

from __future__ import annotations

import itertools
import random
from typing import Any

from tools.judge.corpus import (
    ASKS,
    _pair,
    intent_pairs,
    rewritten,
    seed_pairs,
    terse,
    topic_pairs,
)
from tools.judge.rewrite import content_words, rewrite, strip_noise

Pair = dict[str, Any]


def kept(pairs: list[Pair]) -> list[Pair]:
    """The pairs written out: a pair the generator draws and then leaves out carries "_drop"."""
    return [p for p in pairs if not p.get("_drop")]


def norm(text: str) -> str:
    return strip_noise(text).lower().rstrip("?.! ")


def family_pairs(family: str, domain: str, same: list[str]) -> list[Pair]:
    rng = random.Random(0)
    return [_pair(a, b, True, "paraphrase", domain, family, rng)
            for a, b in itertools.pairwise(same)]


def test_topic_pairs_never_pair_two_families_that_ask_one_question() -> None:
    pairs = (family_pairs("f1", "support", ["I want to turn on 2FA for my Instagram account",
                                            "instagram two-factor authentication on, how?",
                                            "How do I enable 2FA on IG?"])
             + family_pairs("f2", "support", ["What are the steps to enable 2-step verification "
                                              "for my Instagram account?",
                                              "instagram 2-step verification setup",
                                              "turn on two-factor authentication for instagram"])
             + family_pairs("f3", "support", ["How do I cancel my Netflix subscription?",
                                              "stop paying for netflix", "end my netflix plan"]))
    where = {norm(t): p["family"] for p in pairs for t in (p["a"], p["b"])}
    made = kept(topic_pairs(pairs, random.Random(1), 400))
    crossed = [{where[norm(p["a"])], where[norm(p["b"])]} for p in made]
    assert {"f1", "f2"} not in crossed
    assert {"f1", "f3"} in crossed and {"f2", "f3"} in crossed  # other topics still pair


def test_topic_pairs_never_pair_texts_that_share_a_content_word() -> None:
    pairs = (family_pairs("f1", "coding", ["How do I read a CSV file in pandas?",
                                           "load a csv with pandas"])
             + family_pairs("f2", "coding", ["How do I write a CSV file in pandas?",
                                             "save a DataFrame to csv"])
             + family_pairs("f3", "coding", ["What is a closure in JavaScript?",
                                             "explain JS closures"]))
    made = kept(topic_pairs(pairs, random.Random(2), 400))
    assert made
    assert all(not content_words(p["a"]) & content_words(p["b"]) for p in made)


def test_can_is_never_a_negative_of_how() -> None:
    x = "reduce the size of my docker build context"
    forms = {group: {norm(f.format(x=x)) for f in fs} for group, fs in ASKS.items()}
    group_of = {f: g for g, fs in forms.items() for f in fs}
    pairs = [_pair(f"How do I {x}?", f"steps to {x}?", True, "paraphrase", "devops", "d",
                   random.Random(0))]
    negatives = [{group_of[norm(p["a"])], group_of[norm(p["b"])]} for seed in range(300)
                 for p in kept(intent_pairs(pairs, random.Random(seed), 2)) if not p["same"]]
    assert {"how", "can"} not in negatives
    assert {"can", "should"} in negatives and {"how", "should"} in negatives


def test_no_direction_negative_on_a_symmetric_relation() -> None:
    seed = ("cooking", ("Are a yam and a sweet potato the same thing?",
                        "yam vs sweet potato, same thing?", "is a yam the same as a sweet potato"),
            (("direction", "Are a sweet potato and a yam the same thing?"),
             ("entity", "Are a yam and a potato the same thing?")))
    for s in range(20):
        made = kept(seed_pairs("yam", seed, random.Random(s)))
        assert not [p for p in made if p["kind"] == "direction"]
        assert len([p for p in made if p["kind"] == "entity"]) == 2


def test_a_comparison_is_no_opposite_of_its_symmetric_paraphrases() -> None:
    symmetric = {"js vs python speed", "which runs quicker, javascript or python"}
    seed = ("coding", ("Is JavaScript faster than Python?", *sorted(symmetric),
                       "does JS outperform Python"),
            (("direction", "Is Python faster than JavaScript?"),))
    for s in range(20):
        made = [p for p in kept(seed_pairs("speed", seed, random.Random(s)))
                if p["kind"] == "direction"]
        assert len(made) == 2  # the swapped comparison stays a contrast
        assert not {norm(t) for p in made for t in (p["a"], p["b"])} & symmetric


def test_a_terse_paraphrase_is_never_the_partner_of_a_scope_contrast() -> None:
    terse = "check ssl cert expiry openssl"
    seed = ("devops", ("How do I check when a website's SSL certificate expires from the "
                       "command line?", terse, "cli: when does the https cert on a domain run out",
                       "Using the shell, how can I see the expiry date of a remote server's SSL "
                       "cert?"),
            (("scope", "How do I check when a local certificate file, cert.pem, expires from "
                       "the command line?"),
             ("task", "How do I renew an expiring Let's Encrypt certificate?")))
    tasks_with_terse = 0
    for s in range(20):
        made = kept(seed_pairs("ssl", seed, random.Random(s)))
        scope = [p for p in made if p["kind"] == "scope"]
        assert len(scope) == 2  # the terse partner replaced by another
        assert all(terse not in {norm(p["a"]), norm(p["b"])} for p in scope)
        tasks_with_terse += any(terse in {norm(p["a"]), norm(p["b"])} for p in made
                                if p["kind"] == "task")
    assert tasks_with_terse  # a task contrast is no detail the terse form leaves open


def forms(text: str) -> set[str]:
    return {r for s in range(60) if (r := rewrite(text, random.Random(s))) is not None}


def test_keyword_and_chat_rewrites_keep_what_is_asked() -> None:
    assert {"pandas read CSV file", "read CSV file using pandas"} <= forms(
        "How do I read a CSV file using pandas?")
    assert {"Pandas read CSV file", "read CSV file in Pandas"} <= forms(
        "How do I read a CSV file in Pandas?")
    assert "read CSV file with pandas" in forms("How do I read a CSV file with pandas?")
    assert "France capital" in forms("What is the capital of France?")
    assert "HTTP status 404 meaning" in forms("What does HTTP status 404 mean?")
    assert any("w/ ur" in f for f in forms("can I sync my phone with your app"))
    for text in ("How do I check if a key does not exist in a dict?",
                 "How do I find files larger than 1 GB on Linux?",
                 "How much water should I drink a day?",
                 "How do you say 'the sea is calm' in German?",
                 "How do I copy a file from a remote server to my laptop?"):
        for form in forms(text):
            assert content_words(form) >= content_words(text) - {"mean", "explain"}, form
            kept_words = ("not", "larger", "a day", "'the sea is calm'", "from")
            assert any(w in form for w in kept_words), form


def test_rewritten_twins_keep_the_label_kind_and_family_in_every_domain() -> None:
    rng = random.Random(0)
    source = [
        _pair("How do I read a CSV file with pandas?", "load a csv with pandas", True,
              "paraphrase", "coding", "train_family", rng),
        _pair("How do I read a CSV file with pandas?", "How do I write a CSV file with pandas?",
              False, "task", "coding", "train_family", rng),
        _pair("What is the capital of France?", "France's capital city?", True, "paraphrase",
              "geography", "dev_family", rng),
        _pair("What is the capital of France?", "What was the capital of France in 1900?", False,
              "time", "geography", "dev_family", rng),
        _pair("How long should I boil an egg for a runny yolk?", "soft boiled egg timing?", True,
              "paraphrase", "cooking", "cook", rng),
    ] * 30
    twins = rewritten(source, 11)
    assert {p["family"] for p in twins} == {"train_family", "dev_family", "cook"}
    assert {(p["family"], p["same"], p["kind"]) for p in twins} <= {
        (p["family"], p["same"], p["kind"]) for p in source}
    assert sum(p["same"] for p in twins) > sum(not p["same"] for p in twins) > 0
    assert twins == rewritten(source, 11)  # deterministic


def test_a_letter_that_names_something_is_no_article() -> None:
    for text, name in (("How much vitamin A should I take daily?", "vitamin a"),
                       ("how much vitamin a should i take daily", "vitamin a"),
                       ("Is hepatitis A contagious?", "hepatitis a"),
                       ("is hepatitis a contagious", "hepatitis a"),
                       ("How does a Series A round work?", "series a round"),
                       ("difference between a and an in english", "between a and an"),
                       ("O donor to A recipient - compatible?", "o donor to a recipient"),
                       ("What does for a in range(3) do in Python?", "for a in range(3)"),
                       ("bite the bullet meaning", "bite the bullet"),
                       ("What does a stitch in time saves nine mean?", "a stitch in time"),
                       ("What is the meaning of a stitch in time?", "of a stitch in time")):
        for form in forms(text):  # '&' for 'and' is a chat spelling
            assert name in form.lower().replace(" & ", " and "), (text, form)


def test_tool_first_moves_no_particle_idiom_or_part_of_a_question() -> None:
    for text, kept in (("How do I switch on dark mode?", "switch on dark mode"),
                       ("How do I sort a list in place?", "in place"),
                       ("docker 20.10 turn on buildkit", "turn on buildkit"),
                       ("What is the maximum carry on size limit?", "carry on size limit"),
                       ("Can you explain recursion in a nutshell?", "recursion in"),
                       ("what did medieval peasants in england eat?", "peasants in england eat"),
                       ("Can I drink alcohol while on metronidazole?", "while on metronidazole")):
        for form in forms(text):
            assert kept in form.lower(), (text, form)


def test_x_of_y_keeps_a_name_that_spans_of() -> None:
    for text, name in (("Who won the Battle of Hastings?", "battle of hastings"),
                       ("What was the Declaration of Independence?", "declaration of independence"),
                       ("What were the Articles of Confederation?", "articles of confederation"),
                       ("what were the articles of confederation", "articles of confederation")):
        for form in forms(text):
            assert name in form.lower(), (text, form)


def test_an_open_contrast_never_gets_a_terse_twin() -> None:
    rng = random.Random(0)
    source = [_pair("What was the Marshall Plan?", "Explain the Marshall Plan in one sentence.",
                    False, kind, "history", "plan", rng) for kind in ("constraint", "task")] * 60
    source += [_pair("How do I check when a website's SSL certificate expires from the command "
                     "line?", "How do I check when a local certificate file expires from the "
                     "command line?", False, "scope", "devops", "ssl", rng)] * 20
    twins = rewritten(source, 11)
    assert {p["kind"] for p in twins} == {"scope", "task"}
    originals = {norm(p[s]) for p in source for s in ("a", "b")}
    for p in twins:
        side = next(p[s] for s in ("a", "b") if norm(p[s]) not in originals)
        assert p["kind"] == "task" or not terse(side), (p["kind"], side)
