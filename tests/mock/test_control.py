"""Live control (mock_server/hook/control.py): a running mock's latency, faults and load model
changed by writing its --control-file, without a restart."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from api_server.config import ConfigError
from contract import spec
from mock_server.config import MockConfig
from mock_server.hook.control import Control, apply
from mock_server.testing import transport
from tests.support.mock import AUTH, MockProcess, completion_body

COMPLETIONS = spec().completions_path
WAIT_S = 60
FORCED = set(spec().mock_faults["statuses"])


def write(path: Path, values: Any) -> None:
    """The whole file at once, as a CI job should write it (a temp file, then a rename)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(values))
    os.replace(tmp, path)


def until(check: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def test_fault_rates_change_while_the_mock_runs(tmp_path: Path) -> None:
    control = tmp_path / "control.json"
    with httpx.Client(
        transport=transport(control_file=str(control)), base_url="http://mock.test", headers=AUTH
    ) as c:

        def status() -> int:
            return c.post(COMPLETIONS, json=completion_body()).status_code

        assert status() == 200  # no file yet: the command line's settings
        write(control, {"fault_rate": 1})
        assert until(lambda: status() in FORCED)
        assert all(status() in FORCED for _ in range(10))
        write(control, {"fault_rate": 1, "nonsense": 3})  # refused whole: the faults stay
        time.sleep(0.5)
        assert all(status() in FORCED for _ in range(5))
        control.unlink()  # back to the command line's
        assert until(lambda: status() == 200)


def test_the_load_model_turns_on_live(tmp_path: Path) -> None:
    control = tmp_path / "control.json"
    config = MockConfig(control_file=str(control))
    settings = Control(config)
    assert not settings().loaded
    write(control, {"load_profile": "llama-8b-h100", "max_num_seqs": 2})
    assert until(lambda: settings().loaded)
    assert (settings().max_num_seqs, settings().tpot_ms) == (2, 12.0)


@pytest.mark.parametrize(
    "values,message",
    [
        ([1], "the control file must hold a JSON object"),
        (
            {"keys": "a"},
            "not settable live: keys (live: ttft_ms, tpot_ms, fault_rate, stream_error_rate, "
            "load_profile, max_num_seqs, max_num_queued_reqs, prefill_ms_per_token, "
            "time_factor_under_load, full_load_seqs, jitter)",
        ),
        ({"fault_rate": 2}, "--fault-rate (MOCK_FAULT_RATE) must be between 0 and 1, got 2"),
    ],
)
def test_a_bad_control_file_is_refused_with_the_reason(values: Any, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        apply(MockConfig(), values)
    assert str(info.value) == message


def test_every_worker_of_a_running_mock_follows_the_file(tmp_path: Path) -> None:
    control = tmp_path / "control.json"
    server = MockProcess("--workers", "2", "--control-file", str(control)).start()
    try:

        def status() -> int:  # a new connection each, so that either worker may answer
            return httpx.post(
                server.url + COMPLETIONS, json=completion_body(), headers=AUTH, timeout=60
            ).status_code

        assert status() == 200
        write(control, {"fault_rate": 1})
        assert until(lambda: all(status() in FORCED for _ in range(8)))
        write(control, {"fault_rate": 0})
        assert until(lambda: all(status() == 200 for _ in range(8)))
    finally:
        server.close()


def test_a_batch_raised_live_admits_those_waiting_at_once() -> None:
    """Issue 32: raising max_num_seqs live admitted no one until a running request ended
    (3 waited 2.8 s with 3 slots free), and new arrivals queued behind them."""
    import dataclasses

    from mock_server.hook.load import Scheduler

    current = [MockConfig(max_num_seqs=1)]
    scheduler = Scheduler(lambda: current[0], None)
    first, second, third = scheduler.enter(), scheduler.enter(), scheduler.enter()
    assert first.running and not second.running and not third.running
    assert not scheduler.wait(second, timeout=0.3)  # the batch is full: it waits
    current[0] = dataclasses.replace(current[0], max_num_seqs=4)  # as a control file would
    assert scheduler.wait(second, timeout=WAIT_S) and scheduler.wait(third, timeout=WAIT_S)
    assert first.running  # nobody had to end for it
    fourth = scheduler.enter()  # a slot is free: no queue
    assert fourth.running and scheduler.running == 4 and not scheduler.waiting
    for ticket in (first, second, third, fourth):
        scheduler.leave(ticket)
    assert scheduler.running == 0
