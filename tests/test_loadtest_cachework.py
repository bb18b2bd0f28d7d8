import collections
import itertools

import pytest

from loadtest.cachework import load_families
from loadtest.request import WorkloadConfig
from loadtest.workload import stream


def take(n, seed=0, **cache):
    params = {"questions": 213, "repeat": 0.3, "paraphrase": 0.2, "near_miss": 0.1, "zipf": 1.0}
    params.update(cache)
    return list(itertools.islice(stream(WorkloadConfig(name="cache", seed=seed, cache=params,
                                                       output_len=8), None), n))


def test_templates_ship_and_are_well_formed():
    fams = load_families()
    assert len(fams) >= 20 and sum(len(f.values) for f in fams) >= 200
    for f in fams:
        assert len(f.forms) >= 4 and all("{x}" in form for form in f.forms)
        assert len(set(f.values)) == len(f.values) >= 7


def test_kinds_follow_the_ratios_and_the_seed():
    rs = take(300)
    assert [r.prompt for r in rs] == [r.prompt for r in take(300)]
    assert [r.prompt for r in rs] != [r.prompt for r in take(300, seed=1)]
    kinds = collections.Counter(r.kind for r in rs)
    assert kinds["repeat"] / 300 == pytest.approx(0.3, abs=0.08)
    assert kinds["paraphrase"] / 300 == pytest.approx(0.2, abs=0.07)
    assert kinds["near_miss"] / 300 == pytest.approx(0.1, abs=0.05)


def test_each_kind_means_what_it_says():
    rs = take(400)
    texts: dict[str, set[str]] = collections.defaultdict(set)
    forms_by_family: dict[str, set[str]] = collections.defaultdict(set)
    for r in rs:
        seen_before = texts[r.canonical_id]
        if r.kind == "repeat":
            assert r.prompt in seen_before
        elif r.kind == "paraphrase":
            assert seen_before and r.prompt not in seen_before
        else:  # new and near misses are questions not asked before
            assert not seen_before
        texts[r.canonical_id].add(r.prompt)
        forms_by_family[r.canonical_id.split(":")[0]].add(r.canonical_id)
    assert all(r.canonical_id.split(":")[0] for r in rs if r.kind == "near_miss")


def test_zipf_concentrates_popularity():
    flat = collections.Counter(r.canonical_id for r in take(400, zipf=0.0, repeat=0.7,
                                                           paraphrase=0, near_miss=0))
    steep = collections.Counter(r.canonical_id for r in take(400, zipf=1.5, repeat=0.7,
                                                            paraphrase=0, near_miss=0))
    assert steep.most_common(1)[0][1] > 2 * flat.most_common(1)[0][1]


def test_cache_workload_against_the_caching_mock(capsys):
    from loadtest.cli import main
    from loadtest.report import parse_block
    from tests.test_loadtest_mock import mock_server

    with mock_server("--ttft-ms", "20", "--itl-ms", "2", "--cache", "exact") as url:
        assert main(["run", "--target", url, "--workload", "cache", "--num-prompts", "40",
                     "--max-concurrency", "1", "--output-len", "4", "--no-progress"]) == 0
    rows = parse_block(capsys.readouterr().out)
    assert rows["Cache hits"] > 5 and rows["Cache misses"] > 5
    assert rows["Wrong cached answers"] == 0 and rows["Unverified cached answers"] == 0
    assert rows["Mean TTFT hit (ms)"] < 10 < rows["Mean TTFT miss (ms)"]
    assert rows["mock_cache_hits_total"] == rows["Cache hits"]   # target /metrics delta
