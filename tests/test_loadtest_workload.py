import dataclasses
import itertools
import json

import pytest

from loadtest import workload
from loadtest.request import WorkloadConfig
from loadtest.tokens import HFTokenizer
from tests.support.procs import ensure_tiny_model


def take(cfg, n, tok=None):
    return list(itertools.islice(workload.stream(cfg, tok), n))


def test_random_is_seeded_and_lengths_respect_the_range_ratio():
    cfg = WorkloadConfig(seed=1, input_len=40, output_len=20, range_ratio=0.5)
    a, b = take(cfg, 50), take(cfg, 50)
    assert [r.prompt for r in a] == [r.prompt for r in b]
    assert all(10 <= r.max_tokens <= 30 for r in a)
    assert len({r.max_tokens for r in a}) > 5
    assert all(20 <= len(r.prompt.split()) <= 60 for r in a)


def test_random_with_a_tokenizer_hits_exact_token_counts():
    tok = HFTokenizer(str(ensure_tiny_model()))
    cfg = WorkloadConfig(seed=0, input_len=64, output_len=8, ignore_eos=True)
    reqs = take(cfg, 5, tok)
    assert all(r.prompt_len == 64 == len(tok.encode(r.prompt)) for r in reqs)
    assert all(r.ignore_eos for r in reqs)


def test_repeat_workload_holds_its_repeat_ratio_and_resends_whole_requests():
    cfg = WorkloadConfig(name="repeat", seed=3, input_len=30, output_len=20, range_ratio=0.5,
                         cache={"repeat": 0.6, "zipf": 1.0})
    reqs = take(cfg, 2000)
    assert [r.index for r in reqs] == list(range(2000))
    first: dict[str, tuple[str, int]] = {}
    for r in reqs:
        if r.kind == "new":
            assert r.canonical_id == f"p{r.index}"
            assert r.prompt not in {p for p, _ in first.values()}
            first[r.canonical_id] = (r.prompt, r.max_tokens)
        else:  # the very request sent before: prompt and length (both are in the cache's key)
            assert r.kind == "repeat" and first[r.canonical_id] == (r.prompt, r.max_tokens)
    late = reqs[1000:]  # the ratio holds however long the run: no pool to run dry
    assert 0.55 < sum(r.kind == "repeat" for r in late) / len(late) < 0.65
    popular = sum(r.canonical_id == reqs[0].canonical_id for r in reqs if r.kind == "repeat")
    assert popular > 60  # Zipf: the first prompt is the most repeated
    assert [r.prompt for r in take(cfg, 50)] == [r.prompt for r in reqs[:50]]
    other = WorkloadConfig(name="repeat", seed=4, input_len=30, output_len=20,
                           cache={"repeat": 0.6})
    assert [r.prompt for r in take(other, 5)] != [r.prompt for r in reqs[:5]]


def test_repeat_workload_never_sends_a_fresh_prompt_twice_with_a_tokenizer():
    # the tiny tokenizer decodes some token runs to the same text (byte tokens -> U+FFFD):
    # a "new" prompt equal to an earlier one was an exact-cache hit the judge then called wrong
    tok = HFTokenizer(str(ensure_tiny_model()))
    cfg = WorkloadConfig(name="repeat", seed=0, input_len=64, output_len=64, range_ratio=0.33,
                         ignore_eos=True, cache={"repeat": 0.6, "zipf": 1.0})
    new = [r.prompt for r in take(cfg, 300, tok) if r.kind == "new"]
    assert len(new) > 100 and len(set(new)) == len(new)


def test_prefix_workload_shares_prefixes():
    cfg = WorkloadConfig(name="prefix", prefix_len=30, suffix_len=5, num_prefixes=2)
    reqs = take(cfg, 20)
    heads = {" ".join(r.prompt.split()[:30]) for r in reqs}
    assert len(heads) == 2
    assert len({r.prompt for r in reqs}) == 20


def test_sharegpt(tmp_path):
    data = [{"conversations": [{"from": "human", "value": f"question {i} " * 3},
                               {"from": "gpt", "value": "answer " * (i + 4)}]}
            for i in range(5)] + [{"conversations": [{"from": "human", "value": "alone"}]}]
    f = tmp_path / "sg.json"
    f.write_text(json.dumps(data))
    reqs = take(WorkloadConfig(name="sharegpt", dataset_path=str(f), output_len=0), 12)
    assert {r.prompt for r in reqs} == {f"question {i} " * 3 for i in range(5)}  # cycles
    assert all(r.max_tokens >= 5 for r in reqs)
    assert all(r.user is None for r in reqs)


def test_sharegpt_rows_carry_their_user_into_the_body(tmp_path):
    from loadtest.client import Client, ClientConfig

    data = [{"user": f"tenant-{i % 2}", "conversations": [
        {"from": "human", "value": f"question {i}"}, {"from": "gpt", "value": "an answer"}]}
        for i in range(4)]
    f = tmp_path / "sg.json"
    f.write_text(json.dumps(data))
    reqs = take(WorkloadConfig(name="sharegpt", dataset_path=str(f), output_len=0), 4)
    assert {r.prompt.split()[1]: r.user for r in reqs} == {
        "0": "tenant-0", "1": "tenant-1", "2": "tenant-0", "3": "tenant-1"}
    body = json.loads(Client(ClientConfig(base_url="http://x", model="m"), None).body(reqs[0]))
    assert body["user"] == reqs[0].user


def test_bad_workload_settings_fail_early(tmp_path):
    with pytest.raises(ValueError, match="not found"):
        workload.stream(WorkloadConfig(name="sharegpt", dataset_path="/nope"), None)
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        workload.stream(WorkloadConfig(name="sharegpt",
                                                dataset_path=str(tmp_path / "bad.json")), None)
    with pytest.raises(ValueError, match="range ratio"):
        workload.stream(WorkloadConfig(range_ratio=1.5), None)


def test_sharegpt_rows_of_another_shape_are_skipped_not_a_crash(tmp_path):
    rows = [{"conversations": [{"from": "human"}, {"value": "a"}]},     # no value
            {"conversations": "hello"},                                  # not a list
            {"conversations": [{"value": "q?"}, {"value": "an answer"}]}]
    f = tmp_path / "s.json"
    f.write_text(json.dumps(rows))
    assert workload.load_sharegpt(str(f)) == [("q?", "an answer", None)]
    f.write_text(json.dumps({"conversations": []}))
    with pytest.raises(ValueError, match="expected a JSON list"):
        workload.load_sharegpt(str(f))


def _custom(tmp_path, rows):
    f = tmp_path / "wl.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(f)


def test_custom_workload_replays_a_jsonl_file_in_a_seeded_order(tmp_path):
    path = _custom(tmp_path, [{"prompt": f"def f{i}():\n    return {i}\n", "output_tokens": 5 + i}
                              for i in range(6)] + [{"prompt": "no length"}])
    reqs = take(WorkloadConfig(name="custom", dataset_path=path, output_len=9, seed=2), 14)
    assert sorted(r.prompt for r in reqs[:7]) == sorted(
        [f"def f{i}():\n    return {i}\n" for i in range(6)] + ["no length"])
    assert [r.prompt for r in reqs[7:]] == [r.prompt for r in reqs[:7]]  # cycles, same order
    lengths = {r.prompt: r.max_tokens for r in reqs}
    assert lengths["no length"] == 9 and lengths["def f3():\n    return 3\n"] == 8
    other = take(WorkloadConfig(name="custom", dataset_path=path, seed=3), 7)
    assert [r.prompt for r in other] != [r.prompt for r in reqs[:7]]


def test_repeat_workload_over_a_dataset_sends_each_fresh_row_once_per_run_and_seed(tmp_path):
    # two rows only: the file cycles, yet no "new" prompt repeats an earlier one (a cache would
    # call it a hit), and another seed (a sweep's next point) shares none of the first's prompts
    path = _custom(tmp_path, [{"prompt": "x = 1\n", "output_tokens": 4},
                              {"prompt": "y = 2\n", "output_tokens": 6}])
    cfg = WorkloadConfig(name="repeat", dataset_path=path, seed=5,
                         cache={"repeat": 0.5, "zipf": 1.0})
    reqs = take(cfg, 200)
    new = [r for r in reqs if r.kind == "new"]
    assert 70 < len(new) < 130 and len({r.prompt for r in new}) == len(new)
    assert all(r.prompt.split("\n", 1)[1] in ("x = 1\n", "y = 2\n") for r in new)
    assert {r.max_tokens for r in new} == {4, 6}
    again = {r.prompt for r in take(dataclasses.replace(cfg, seed=6), 200)}
    assert not again & {r.prompt for r in reqs}


def test_custom_dataset_errors_name_the_file_and_line(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"prompt": "ok"}\n{"prompt": 3}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: expected"):
        workload.stream(WorkloadConfig(name="custom", dataset_path=str(f)), None)
    f.write_text('{"prompt": "ok", "output_tokens": 0}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1: expected"):
        workload.stream(WorkloadConfig(name="custom", dataset_path=str(f)), None)
    f.write_text("{\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:1: not JSON"):
        workload.stream(WorkloadConfig(name="repeat", dataset_path=str(f)), None)
    f.write_text("\n")
    with pytest.raises(ValueError, match="has no prompts"):
        workload.stream(WorkloadConfig(name="custom", dataset_path=str(f)), None)
    with pytest.raises(ValueError, match="needs --dataset-path"):
        workload.stream(WorkloadConfig(name="custom"), None)


def test_custom_rows_are_split_at_newlines_only(tmp_path):
    """JSON leaves U+2028, U+2029 and U+0085 unescaped inside strings (json.dumps with
    ensure_ascii=False, pandas' to_json): a prompt may hold them, as vllm bench serve's
    line-by-line reader accepts. Before, str.splitlines() cut such a row in two and the file was
    refused ('not JSON'). CRLF line ends still read."""
    rows = [{"prompt": "a\u2028b", "output_tokens": 3}, {"prompt": "c\x85d\u2029e"}]
    f = tmp_path / "wl.jsonl"
    f.write_bytes("\r\n".join(json.dumps(r, ensure_ascii=False) for r in rows).encode())
    assert workload.load_custom(str(f)) == [("a\u2028b", 3), ("c\x85d\u2029e", None)]
