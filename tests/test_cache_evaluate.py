"""CI gate: labelled pairs through the real `python -m proxy.cache.evaluate` command; the
pairs file's reading and its errors (proxy/cache/pairs.py) are tested here too, through it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
PAIRS = REPO / "tests" / "data" / "cache_pairs.jsonl"

KEYS = {"pairs", "true_hits", "false_hits", "missed", "precision", "recall", "false_hit_rate",
        "false_hit_rate_95ci", "cache_mode", "max_false_hit_rate", "judge_threshold",
        "cosine_floor", "judge_model"}


def run(*args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "proxy.cache.evaluate", *args], cwd=REPO,
                         capture_output=True, text=True, check=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_labelled_set_is_big_and_balanced() -> None:
    pairs = [json.loads(line) for line in PAIRS.read_text().splitlines() if line.strip()]
    assert len(pairs) >= 300
    same = sum(p["same"] for p in pairs)
    assert 0.3 < same / len(pairs) < 0.7


@pytest.mark.slow
def test_the_false_hit_bound_holds_on_the_test_split() -> None:
    report = run()  # the test split by default
    assert set(report) == KEYS | {"false_hit_rate_95ci_families"}  # its pairs name families
    assert report["pairs"] >= 500
    assert report["false_hit_rate_95ci"][0] <= report["max_false_hit_rate"]


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="issue 11's goal is not met yet: the committed judge "
                   "cannot promise 1 % on dev, so nothing passes (docs/cache.md)")
def test_goal_precision_and_recall_on_the_test_split() -> None:
    report = run()
    assert report["precision"] is not None and report["precision"] >= 0.99  # None: no hits
    assert report["recall"] >= 0.85


@pytest.mark.slow
def test_the_false_hit_bound_holds_on_the_old_hand_labelled_set() -> None:
    report = run("--pairs", str(PAIRS))
    assert report["false_hit_rate_95ci"][0] <= report["max_false_hit_rate"]


def test_command_counts_hits_and_misses(tmp_path: Path) -> None:
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(json.dumps(p) for p in [
        {"a": "What is the capital of France?", "b": "What is the capital of France?",
         "same": True},
        {"a": "Convert JSON to YAML", "b": "Convert YAML to JSON", "same": False},
        {"a": "How do I bake bread?", "b": "What is a monad?", "same": True},
        {"a": "How many euros is 100 US dollars?", "b": "How many euros is 200 US dollars?",
         "same": False},
    ]))
    report = run("--pairs", str(path))
    assert set(report) == KEYS
    assert {k: report[k] for k in ("pairs", "true_hits", "false_hits", "missed", "precision",
                                   "recall", "false_hit_rate")} == {
        "pairs": 4, "true_hits": 1, "false_hits": 0, "missed": 1, "precision": 1.0,
        "recall": 0.5, "false_hit_rate": 0.0}
    low, high = report["false_hit_rate_95ci"]
    assert low == 0.0 and 0.5 < high < 1.0  # one hit, none false: a wide interval


def test_the_evaluation_judges_every_pair_whatever_the_shedding_bound(tmp_path: Path) -> None:
    """All pairs are looked up at once; the proxy's judge and embedder queue bounds must not
    turn them into misses (PROXY_CACHE_JUDGE_MAX_PENDING=1 or PROXY_CACHE_EMBED_MAX_PENDING=1
    would shed all but one)."""
    topics = ["reverse a list", "sort a dictionary by value", "read a JSON file",
              "merge two dictionaries", "flatten a nested list", "count words in a string",
              "remove whitespace from a string", "check if a file exists"]
    path = tmp_path / "pairs.jsonl"
    wrong = {"a": "How do I sort a list?", "b": "How do I sort a list?", "same": False,
             "family": "mislabelled"}  # identical texts always hit: one false hit
    path.write_text("\n".join([json.dumps({"a": f"How do I {t} in Python?",
                                           "b": f"what's the way to {t} in python?",
                                           "same": True, "family": t}) for t in topics]
                              + [json.dumps(wrong)]))
    out = subprocess.run([sys.executable, "-m", "proxy.cache.evaluate", "--pairs", str(path)],
                         cwd=REPO, capture_output=True, text=True, check=True, timeout=600,
                         env={**os.environ, "PROXY_CACHE_JUDGE_MAX_PENDING": "1",
                              "PROXY_CACHE_EMBED_MAX_PENDING": "1",
                              "PROXY_CACHE_MAX_FALSE_HIT_RATE": "0.25"})
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["judge_threshold"] is not None
    assert (report["true_hits"], report["false_hits"]) == (len(topics), 1)
    low, high = report["false_hit_rate_95ci_families"]  # families named: their interval too
    assert low <= 1 / 9 <= high and high >= report["false_hit_rate_95ci"][1]
    assert report["judge_model"] == "mpnet"


def _write(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _fails(*args: str) -> str:
    """The command's error (stderr) for input it must refuse: exit status 2, no traceback."""
    out = subprocess.run([sys.executable, "-m", "proxy.cache.evaluate", *args], cwd=REPO,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    return out.stderr


def test_same_given_as_strings_or_numbers_is_read_as_meant(tmp_path: Path) -> None:
    """bool("false") is True: "same": "false" was counted as an equal pair, "no" too."""
    q = "What is the capital of France?"  # identical texts: always a hit (exact tier)
    path = _write(tmp_path / "pairs.jsonl", [
        {"a": q, "b": q, "same": "false"}, {"a": q, "b": q, "same": "No"},
        {"a": q, "b": q, "same": 0}, {"a": q, "b": q, "same": "yes"},
        {"a": q, "b": q, "same": "TRUE"}, {"a": q, "b": q, "same": 1},
        {"a": q, "b": q, "same": "1"}])
    report = run("--pairs", str(path))
    assert (report["true_hits"], report["false_hits"]) == (4, 3)


@pytest.mark.parametrize("same", [None, "maybe", 2, 0.5, [True]])
def test_a_same_that_is_no_label_is_an_error_naming_the_line(tmp_path: Path,
                                                               same: Any) -> None:
    path = _write(tmp_path / "pairs.jsonl", [{"a": "x", "b": "x", "same": True},
                                             {"a": "y", "b": "y", "same": same}])
    assert f"{path}:2:" in _fails("--pairs", str(path))


@pytest.mark.parametrize(("line", "says"), [
    ('{"a": "x", "b":', "not a JSON line"),
    ("a,b,same", "not a JSON line"),
    ('["x", "x", true]', "JSON object"),
    ('{"a": "x", "same": true}', "missing 'b'"),
    ('{"question": "x", "label": 1}', "missing 'a', 'b', 'same'"),
    ('{"a": 5, "b": "x", "same": true}', '"a" must be a string'),
    ('{"a": "x", "b": null, "same": true}', '"b" must be a string'),
    ('{"a": "x", "b": "x", "same": true, "family": ["f"]}', '"family" must be a string'),
    ('{"a": "x\\ud800", "b": "x", "same": true}', "not a JSON line"),  # a lone surrogate
    (b'{"a": "caf\xe9", "b": "x", "same": true}', "not a JSON line"),  # Latin-1, not UTF-8
])
def test_a_bad_line_is_an_error_naming_file_and_line(tmp_path: Path, line: str | bytes,
                                                      says: str) -> None:
    """Before: a traceback (orjson's JSONDecodeError, KeyError 'b', TypeError ...)."""
    path = tmp_path / "pairs.jsonl"
    good = b'{"a": "y", "b": "y", "same": true}\n\n'
    path.write_bytes(good + (line if isinstance(line, bytes) else line.encode()) + b"\n")
    err = _fails("--pairs", str(path))
    assert f"{path}:3: " in err and says in err


def test_a_csv_or_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "pairs.csv"
    path.write_text("a,b,same\nx,x,true\n")
    assert f"{path}:1: " in (err := _fails("--pairs", str(path))) and "CSV" in err
    assert "cannot read" in _fails("--pairs", str(tmp_path / "nothing.jsonl"))
    assert "cannot read" in _fails("--pairs", str(tmp_path))  # a directory


def test_bom_crlf_comments_blank_lines_and_a_json_array_are_read(tmp_path: Path) -> None:
    """Before: a UTF-8 BOM, a '#' comment line and a JSON array were each a traceback."""
    q, r = "What is the capital of France?", "How do I bake bread?"
    rows = [{"a": q, "b": q, "same": True, "note": "extra fields are ignored"},
            {"a": r, "b": r, "same": False},
            {"a": "x\u2028y", "b": "x\u2028y", "same": True}]  # U+2028 is not a line end
    body = "\r\n".join(["# written by hand", "", *(json.dumps(p, ensure_ascii=False)
                                                   for p in rows), "  # the end"])
    lines = tmp_path / "pairs.jsonl"
    lines.write_bytes(b"\xef\xbb\xbf" + body.encode())  # no newline at the end
    array = tmp_path / "pairs.json"
    array.write_bytes(b"\xef\xbb\xbf" + json.dumps(rows, indent=2).encode())
    for path in (lines, array):
        report = run("--pairs", str(path))
        assert (report["pairs"], report["true_hits"], report["false_hits"]) == (3, 2, 1)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([rows[0], {"a": "x", "same": True}]))
    assert f"{bad}: pair 2 of the array: missing 'b'" in _fails("--pairs", str(bad))


@pytest.mark.parametrize("body", ["", "\n\n", "# only a comment\n", "[]"])
def test_a_file_without_pairs_is_an_error(tmp_path: Path, body: str) -> None:
    """Before: a report of 0 pairs with precision 1.0 and recall 1.0."""
    path = tmp_path / "pairs.jsonl"
    path.write_text(body)
    assert f"{path}: no pairs" in _fails("--pairs", str(path))


def test_ratios_without_anything_to_count_are_null(tmp_path: Path) -> None:
    """At the default 1 % the judge accepts nothing: pairs of different texts give no hit.
    Before: precision 1.0 (of no hits), false_hit_rate 0.0, and recall 1.0 without a single
    equal pair; now null, and a note on stderr says why nothing hit."""
    path = _write(tmp_path / "pairs.jsonl", [
        {"a": "How do I bake bread?", "b": "what's the way to bake bread at home", "same": True},
        {"a": "Convert JSON to YAML", "b": "Convert YAML to JSON", "same": False}])
    out = subprocess.run([sys.executable, "-m", "proxy.cache.evaluate", "--pairs", str(path)],
                         cwd=REPO, capture_output=True, text=True, check=True, timeout=600,
                         env={k: v for k, v in os.environ.items()
                              if k != "PROXY_CACHE_MAX_FALSE_HIT_RATE"})
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["judge_threshold"] is None  # +inf
    assert "the judge accepts nothing" in out.stderr
    assert (report["true_hits"], report["false_hits"], report["missed"]) == (0, 0, 1)
    assert (report["precision"], report["recall"], report["false_hit_rate"]) == (None, 0.0, None)
    assert report["false_hit_rate_95ci"] == [0.0, 1.0]
    negatives = _write(tmp_path / "negatives.jsonl", [
        {"a": "What is 2+2?", "b": "What is 2+2?", "same": False}])
    report = run("--pairs", str(negatives))
    assert (report["precision"], report["recall"], report["false_hit_rate"]) == (0.0, None, 1.0)


def _env(**changes: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("PROXY_")}, **changes}


def test_settings_are_read_as_the_proxy_reads_them(tmp_path: Path) -> None:
    """The proxy strips PROXY_CACHE_JUDGE_MODEL=" minilm " and serves MiniLM: before, this
    command refused it with a traceback; and it had no flag for the rate or the judge."""
    path = _write(tmp_path / "pairs.jsonl", [{"a": "x y", "b": "x y", "same": True}])
    out = subprocess.run([sys.executable, "-m", "proxy.cache.evaluate", "--pairs", str(path)],
                         cwd=REPO, capture_output=True, text=True, timeout=600,
                         env=_env(PROXY_CACHE_JUDGE_MODEL=" minilm "))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1])["judge_model"] == "minilm"
    report = run("--pairs", str(path), "--cache-max-false-hit-rate", "0.25",
                 "--judge-model", "minilm", "--cache-threshold", "0.5")
    assert (report["max_false_hit_rate"], report["judge_model"], report["cosine_floor"]) == (
        0.25, "minilm", 0.5)
    assert isinstance(report["judge_threshold"], float)  # 25 % admits a threshold


def test_exact_and_off_are_evaluated_as_the_proxy_serves_them(tmp_path: Path) -> None:
    """PROXY_CACHE=exact has no semantic tier and off no cache: before, both were evaluated as
    semantic, reporting paraphrase hits that the proxy at those settings never serves."""
    q = "How do I reverse a list in Python?"
    path = _write(tmp_path / "pairs.jsonl", [
        {"a": q, "b": q, "same": True},
        {"a": q, "b": "how do i reverse a list in Python", "same": True},  # the same question
        {"a": q, "b": q + " ", "same": False}])  # one space more: another exact key
    reports, notes = {}, {}
    for mode in ("semantic", "exact", "off"):
        out = subprocess.run([sys.executable, "-m", "proxy.cache.evaluate", "--pairs", str(path)],
                             cwd=REPO, capture_output=True, text=True, check=True, timeout=600,
                             env=_env(PROXY_CACHE=mode, PROXY_CACHE_MAX_FALSE_HIT_RATE="0.25"))
        reports[mode] = json.loads(out.stdout.strip().splitlines()[-1])
        notes[mode] = f"PROXY_CACHE={mode}:" in out.stderr
    seen = {m: (r["true_hits"], r["false_hits"], r["missed"]) for m, r in reports.items()}
    # (before: exact and off read as semantic, (2, 1, 0): the judge's paraphrase, and a false
    # hit for the question with one space more)
    assert seen == {"semantic": (2, 1, 0), "exact": (1, 0, 1), "off": (0, 0, 2)}
    assert {m: (set(r) == KEYS, r["cache_mode"]) for m, r in reports.items()} == {
        m: (True, m) for m in reports}
    assert notes == {"semantic": False, "exact": True, "off": True}  # said on stderr
    assert reports["exact"]["judge_threshold"] is reports["off"]["judge_threshold"] is None
    assert run("--pairs", str(path), "--cache", "off")["true_hits"] == 0  # serve's flag too


async def test_verbose_prints_each_mistake_on_one_line(capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    """Questions with line breaks or control characters are printed as JSON strings: before,
    as they were, a question with a newline took two lines (or more) of the mistakes."""
    from proxy.cache.config import CacheConfig
    from proxy.cache.evaluate import evaluate

    odd = "first line\nsecond\r\tthird\u2028fourth\x85fifth\x00 \"quoted\" caf\u00e9"
    pairs = [{"a": odd, "b": odd, "same": False, "kind": "k"},  # identical: a false hit
             {"a": "x\ny", "b": "x\r\ny", "same": True, "kind": "k"},  # exact: missed
             {"a": "plain", "b": "plain", "same": True}]
    report = await evaluate(pairs, CacheConfig(mode="exact"), verbose=True)
    assert (report["false_hits"], report["missed"]) == (1, 1)
    mistakes = [line for line in capsys.readouterr().err.splitlines()
                if line.startswith(("FALSE HIT", "MISSED"))]
    shown = ('"first line\\nsecond\\r\\tthird\\u2028fourth\\u0085fifth\\u0000 '
             '\\"quoted\\" caf\u00e9"')
    assert mistakes == [f"FALSE HIT sim=1.0 | {shown} | {shown}",
                        'MISSED sim=None | "x\\ny" | "x\\r\\ny"']
    assert json.loads(shown) == odd


@pytest.mark.parametrize(("args", "env", "says"), [
    (["--threshold", "5"], {}, "PROXY_CACHE_THRESHOLD must be in (0, 1]"),
    (["--max-false-hit-rate", "1.5"], {}, "PROXY_CACHE_MAX_FALSE_HIT_RATE must be in (0, 1)"),
    ([], {"PROXY_CACHE_MAX_FALSE_HIT_RATE": "2"}, "PROXY_CACHE_MAX_FALSE_HIT_RATE must be in"),
    ([], {"PROXY_CACHE_MAX_FALSE_HIT_RATE": "5%"}, "cannot parse '5%'"),
    (["--judge-model", "nope"], {}, "PROXY_CACHE_JUDGE_MODEL: mpnet, minilm or a directory"),
])
def test_settings_the_proxy_refuses_are_refused(tmp_path: Path, args: list[str],
                                                env: dict[str, str], says: str) -> None:
    """Before: --threshold 5 ran (no pair could pass the floor); a bad variable was a
    traceback."""
    path = _write(tmp_path / "pairs.jsonl", [{"a": "x y", "b": "x y", "same": True}])
    out = subprocess.run([sys.executable, "-m", "proxy.cache.evaluate", "--pairs", str(path),
                          *args], cwd=REPO, capture_output=True, text=True, timeout=600,
                         env=_env(**env))
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert says in out.stderr


def test_help_explains_the_input_and_the_report() -> None:
    """Before, --help named the flags only: nothing on the fields, the labels or the report."""
    out = subprocess.run([sys.executable, "-m", "proxy.cache.evaluate", "--help"], cwd=REPO,
                         capture_output=True, text=True, check=True, timeout=60).stdout
    for words in ('"a"', '"b"', '"same"', "JSONL", '"yes"/"no"', "family", "kind",
                  "false_hit_rate_95ci", "null", "PROXY_CACHE_MAX_FALSE_HIT_RATE",
                  "--max-false-hit-rate", "--judge-model", "--output"):
        assert words in out, words


def test_output_file_and_one_pairs_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "pairs.jsonl", [{"a": "x y", "b": "x y", "same": True}])
    report = run("--pairs", str(path), "--output", str(tmp_path / "report.json"))
    assert json.loads((tmp_path / "report.json").read_text()) == report
    other = _write(tmp_path / "other.jsonl", [{"a": "z", "b": "z", "same": True}])
    assert "two pairs files" in _fails(str(other), "--pairs", str(path))
