"""Settings (MOCK_* and the command line), pacing and the keepalive pump, without a server."""
from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from contract import spec
from mock_server.__main__ import config_from, parser
from mock_server.config import MockConfig
from api_server.engine import ChoiceDelta, Usage
from api_server.pacing import Pump
from mock_server.latency import paced

MODEL = spec().default_model


def test_defaults_come_from_the_spec() -> None:
    config = MockConfig()
    assert config.keepalive_seconds == spec().caps["keepalive_seconds"]
    assert (config.keys, config.budget_tokens, config.ttft_ms, config.tpot_ms, config.fault_rate) == (
        None, None, 0, 0, 0)


def test_from_env() -> None:
    env = {"MOCK_KEYS": "a, b", "MOCK_BUDGET_TOKENS": "1000", "MOCK_TTFT_MS": "12.5",
           "MOCK_MAX_MODEL_LEN": f"{MODEL}=4096", "MOCK_KEEPALIVE_SECONDS": "0.5", "OTHER": "x"}
    config = MockConfig.from_env(env)
    assert (config.keys, config.budget_tokens, config.ttft_ms, config.max_model_len, config.keepalive_seconds) == (
        ("a", "b"), 1000, 12.5, {MODEL: 4096}, 0.5)



def test_one_max_model_len_for_every_model() -> None:
    assert MockConfig.from_env({"MOCK_MAX_MODEL_LEN": "2048"}).max_model_len == {m: 2048 for m in spec().models}


def test_command_line_overrides_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOCK_TPOT_MS", "5")
    monkeypatch.setenv("MOCK_TTFT_MS", "7")
    args = parser().parse_args(["--port", "9000", "--workers", "3", "--ttft-ms", "1", "--keys", "x,y",
                                "--budget-tokens", "50"])
    config = config_from(args)
    assert (args.port, args.workers) == (9000, 3)
    assert (config.ttft_ms, config.tpot_ms, config.keys, config.budget_tokens) == (1, 5, ("x", "y"), 50)
    assert config.budget_dir is not None   # made before the fork, shared by the workers


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
            release.wait(10)   # never released again: the reader goes away
            yield 3
        finally:
            finished.set()

    pump: Pump[int] = Pump(slow, interval=0.01)
    batches = pump.batches()
    assert next(batches) == [1]
    assert next(batches) == []          # a keepalive interval passed with nothing
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
