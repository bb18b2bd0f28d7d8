import pytest

from loadtest.cli import main

BASE = ["run", "--target", "http://127.0.0.1:1"]


@pytest.mark.parametrize(("extra", "message"), [
    (["--request-rate", "0"], "--request-rate must be > 0"),
    (["--range-ratio", "1.2"], "--range-ratio must be in [0, 1)"),
    (["--num-prompts", "0"], "--num-prompts must be > 0"),
    (["--workload", "sharegpt"], "needs --dataset-path"),
    (["--repeat-ratio", "0.8", "--paraphrase-ratio", "0.5"], "sum <= 1"),
    (["--percentile-metrics", "ttft,foo"], "unknown ['foo']"),
    (["--metric-percentiles", "fifty"], "expected numbers"),
    (["--goodput", "latency:5"], "expected ttft|tpot|e2el:MILLISECONDS"),
    (["--max-concurrency", "-2"], "--max-concurrency must be > 0"),
    (["--header", "novalue"], "expected KEY:VALUE"),
    # found by a review: each used to be accepted and fail late, flood, or mean nothing
    (["--duration", "5"], "needs --max-concurrency"),
    (["--extra-body", "[1]"], "must be a JSON object"),
    (["--extra-body", "{nope"], "--extra-body: not JSON"),
    (["--timeout", "0"], "--timeout must be > 0"),
    (["--json", "/"], "is a folder"),
    (["--json", "/no/such/dir/x.json"], "no folder"),
    (["--num-prompts", "10", "--request-rate", "10", "--warmup-seconds", "5"],
     "inside the ~1 s of arrivals"),
    # found by a second review: each failed in numpy, its message naming no option
    (["--seed", "-1"], "--seed must be >= 0"),
    (["--workload", "prefix", "--suffix-len", "-1"], "--suffix-len must be >= 0"),
    (["--workload", "prefix", "--prefix-len", "0"], "--prefix-len and --num-prefixes"),
    (["--sharegpt-output-len", "-3"], "--sharegpt-output-len must be >= 0"),
    (["--output-len", "100000000000000000000"], "--input-len and --output-len must be in"),
])
def test_bad_arguments_get_clear_errors(extra, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(BASE + extra)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_target_url(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--target", "localhost:8000"])
    assert "expected a URL" in capsys.readouterr().err


def test_compare_needs_two(capsys):
    with pytest.raises(SystemExit):
        main(["compare", "--target", "a=http://x:1"])
    assert "at least two" in capsys.readouterr().err


def test_unreachable_target_is_a_clear_error(capsys):
    assert main([*BASE, "--num-prompts", "1", "--no-progress", "--no-scrape"]) == 2
    assert "could not read a model" in capsys.readouterr().err


def test_mock_refuses_a_negative_answer_length(capsys):
    with pytest.raises(SystemExit):
        main(["mock", "--output-tokens", "-3"])
    assert "--output-tokens must be > 0" in capsys.readouterr().err


def test_mock_on_a_taken_port_is_a_clear_error(capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert main(["mock", "--port", str(s.getsockname()[1])]) == 2
    assert "cannot listen on" in capsys.readouterr().err
