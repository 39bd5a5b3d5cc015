"""Settings (MOCK_* and the command line), pacing and the keepalive pump, without a server."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from api_server.config import ConfigError
from api_server.engine import ChoiceDelta, Usage
from api_server.pacing import Pump
from contract import spec
from mock_server.__main__ import config_from, parser
from mock_server.config import MockConfig
from mock_server.hook.latency import paced

MODEL = spec().default_model


def test_defaults_come_from_the_spec() -> None:
    config = MockConfig()
    assert (config.keepalive_seconds, config.body_read_seconds) == (None, None)  # the app's spec's
    resolved = config.for_spec(spec())
    assert (resolved.keepalive_seconds, resolved.body_read_seconds) == (
        spec().caps["keepalive_seconds"],
        spec().caps["body_read_seconds"],
    )
    assert MockConfig(keepalive_seconds=0.5).for_spec(spec()).keepalive_seconds == 0.5
    assert (
        config.keys,
        config.budget_tokens,
        config.ttft_ms,
        config.tpot_ms,
        config.fault_rate,
    ) == (None, None, 0, 0, 0)


def test_from_env() -> None:
    env = {
        "MOCK_KEYS": "a, b",
        "MOCK_BUDGET_TOKENS": "1000",
        "MOCK_TTFT_MS": "12.5",
        "MOCK_MAX_MODEL_LEN": f"{MODEL}=4096",
        "MOCK_KEEPALIVE_SECONDS": "0.5",
        "OTHER": "x",
    }
    config = MockConfig.from_env(env)
    assert (
        config.keys,
        config.budget_tokens,
        config.ttft_ms,
        config.max_model_len,
        config.keepalive_seconds,
    ) == (("a", "b"), 1000, 12.5, {MODEL: 4096}, 0.5)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("1", True), ("TRUE", True), ("yes", True), ("0", False), ("false", False), ("No", False)],
)
def test_a_yes_or_no_setting_from_env(raw: str, expected: bool) -> None:
    assert MockConfig.from_env({"MOCK_DISABLE_LOG_STATS": raw}).disable_log_stats is expected


def test_a_yes_or_no_setting_that_is_neither_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        MockConfig.from_env({"MOCK_DISABLE_LOG_STATS": "maybe"})
    assert str(info.value) == "MOCK_DISABLE_LOG_STATS is not valid: 'maybe'"


def test_disable_log_stats_on_the_command_line_wins_over_env(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MOCK_DISABLE_LOG_STATS", "0")
    assert config_from(parser().parse_args(["--disable-log-stats"])).disable_log_stats is True
    assert config_from(parser().parse_args([])).disable_log_stats is False
    assert MockConfig().disable_log_stats is False


def test_one_max_model_len_for_every_model_the_app_serves() -> None:
    """One number is every served model's, whatever spec (or models) the app is built with: the
    default spec's model names are not read (issue 33: they were, for any app)."""
    import dataclasses

    from api_server.app import served_models

    config = MockConfig.from_env({"MOCK_MAX_MODEL_LEN": "2048"})
    served = served_models(spec(), config, None)
    assert {n: m.max_model_len for n, m in served.items()} == dict.fromkeys(spec().models, 2048)
    other = {
        "other-model": dataclasses.replace(next(iter(spec().models.values())), name="other-model")
    }
    assert {n: m.max_model_len for n, m in served_models(spec(), config, other).items()} == {
        "other-model": 2048
    }
    mixed = MockConfig.from_env({"MOCK_MAX_MODEL_LEN": f"{next(iter(spec().models))}=100"})
    assert served_models(spec(), mixed, None)[next(iter(spec().models))].max_model_len == 100


def test_command_line_overrides_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOCK_TPOT_MS", "5")
    monkeypatch.setenv("MOCK_TTFT_MS", "7")
    args = parser().parse_args(
        [
            "--port",
            "9000",
            "--workers",
            "3",
            "--ttft-ms",
            "1",
            "--keys",
            "x,y",
            "--budget-tokens",
            "50",
        ]
    )
    config = config_from(args)
    assert (args.port, args.workers) == (9000, 3)
    assert (config.ttft_ms, config.tpot_ms, config.keys, config.budget_tokens) == (
        1,
        5,
        ("x", "y"),
        50,
    )
    assert config.budget_dir is not None  # made before the fork, shared by the workers


def deltas(indices: list[int]) -> Iterator[ChoiceDelta | Usage]:
    for i in indices:
        yield ChoiceDelta(i, "x", [1])
    yield Usage(1, len(indices))


def test_paced_waits_ttft_once_then_tpot_per_step() -> None:
    waits: list[float] = []
    events = list(paced(deltas([0, 1, 0, 1, 0]), 0.5, 0.1, waits.append))
    assert len(events) == 6 and waits == [0.5, 0.1, 0.1]


def test_unpaced_does_not_wait() -> None:
    waits: list[float] = []
    assert len(list(paced(deltas([0, 0]), 0, 0, waits.append))) == 3 and waits == []


def test_pump_sends_keepalives_while_waiting_and_stops_when_closed() -> None:
    release = threading.Event()
    finished = threading.Event()

    def slow(sleep: object) -> Iterator[int]:
        try:
            yield 1
            release.wait(10)
            yield 2
            release.wait(10)  # never released again: the reader goes away
            yield 3
        finally:
            finished.set()

    pump: Pump[int] = Pump(slow, interval=0.01)
    batches = pump.batches()
    assert next(batches) == [1]
    assert next(batches) == []  # a keepalive interval passed with nothing
    release.set()
    while (batch := next(batches)) == []:
        pass
    assert batch in ([2], [2, 3])
    batches.close()
    assert pump.cancelled.is_set()
    assert finished.wait(10)


def test_pump_hands_over_the_iterators_error() -> None:
    def failing(sleep: object) -> Iterator[int]:
        yield 1
        raise ValueError("engine broke")

    batches = Pump(failing, interval=1).batches()
    with pytest.raises(ValueError):
        collected = [item for batch in batches for item in batch]
        assert collected == [1]


def test_paced_counts_a_delta_of_many_tokens_as_that_many_steps() -> None:
    """The fake engine's whole choices (no stream) wait as long as one token per delta would."""
    waits: list[float] = []
    events = [ChoiceDelta(0, "xyz", [1, 2, 3]), ChoiceDelta(1, "xy", [1, 2]), Usage(1, 5)]
    assert len(list(paced(iter(events), 0.5, 0.1, waits.append))) == 3 and waits == [0.5, 0.1, 0.1]


# -- options checked at start -----------------------------------------------------------
def start_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """What `python -m mock_server ARGV` says when it refuses to start (argparse's exit 2)."""
    from mock_server.__main__ import main

    with pytest.raises(SystemExit) as info:
        main(list(argv))
    assert info.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "argv,message",
    [
        (
            ["--keepalive-seconds", "-1"],
            "--keepalive-seconds (MOCK_KEEPALIVE_SECONDS) must be >= 0 (0 turns keepalives off), got -1.0",
        ),
        (["--ttft-ms", "-5"], "--ttft-ms (MOCK_TTFT_MS) must be >= 0, got -5.0"),
        (
            ["--fault-rate", "1.5"],
            "--fault-rate (MOCK_FAULT_RATE) must be between 0 and 1, got 1.5",
        ),
        (["--eos-rate", "nan"], "--eos-rate (MOCK_EOS_RATE) must be between 0 and 1, got nan"),
        (
            ["--body-read-seconds", "0"],
            "--body-read-seconds (MOCK_BODY_READ_SECONDS) must be > 0, got 0.0",
        ),
        (["--max-num-seqs", "0"], "--max-num-seqs (MOCK_MAX_NUM_SEQS) must be >= 1, got 0"),
        (
            ["--max-num-seqs", "2", "--max-num-queued-reqs", "-1"],
            "--max-num-queued-reqs (MOCK_MAX_NUM_QUEUED_REQS) must be >= 0, got -1",
        ),
        (
            ["--max-num-seqs", "2", "--time-factor-under-load", "0.5"],
            "--time-factor-under-load (MOCK_TIME_FACTOR_UNDER_LOAD) must be >= 1, got 0.5",
        ),
        (
            ["--max-num-queued-reqs", "3"],
            "--max-num-queued-reqs (MOCK_MAX_NUM_QUEUED_REQS) needs --max-num-seqs (MOCK_MAX_NUM_SEQS)",
        ),
        (["--workers", "0"], "argument --workers: must be >= 1, got 0"),
        (
            ["--max-num-seqs", "2", "--workers", "2"],
            "--workers 2 with the load model would admit 2 times --max-num-seqs 2 (each worker has its own batch "
            "and queue): run --workers 1 (one gevent worker holds thousands of streams)",
        ),
        (["--port", "70000"], "argument --port: must be between 0 and 65535, got 70000"),
        (["--graceful-timeout", "-1"], "argument --graceful-timeout: must be >= 0, got -1"),
    ],
)
def test_an_option_out_of_range_is_refused_at_start_naming_it(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert start_error(capsys, *argv) == f"python -m mock_server: error: {message}"


def test_a_bad_variable_is_refused_naming_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOCK_TPOT_MS", "fast")
    assert start_error(capsys).endswith("error: MOCK_TPOT_MS is not valid: 'fast'")
    monkeypatch.setenv("MOCK_TPOT_MS", "-1")
    assert start_error(capsys).endswith("error: --tpot-ms (MOCK_TPOT_MS) must be >= 0, got -1.0")
    monkeypatch.delenv("MOCK_TPOT_MS")
    monkeypatch.setenv("MOCK_WORKERS", "0")
    assert start_error(capsys).endswith("error: argument --workers: must be >= 1, got 0")


def test_keepalive_zero_turns_keepalives_off() -> None:
    """As in vLLM: no `: keepalive` line, however long the first token takes."""
    from mock_server import create_app
    from tests.support.mock import AUTH, completion_body, parse_sse

    def comments(keepalive_s: float) -> list[str]:
        client = create_app(MockConfig(keepalive_seconds=keepalive_s)).test_client()
        r = client.post(
            spec().completions_path,
            json=completion_body(stream=True),
            headers={**AUTH, "X-Mock-Ttft-Ms": "300"},
        )
        stream = parse_sse(r.get_data(as_text=True))
        assert stream.events[-1] == "[DONE]" and stream.chunks
        return stream.comments

    assert comments(0.05) and set(comments(0.05)) == {"keepalive"}  # the contrast: on, they come
    assert comments(0) == []
