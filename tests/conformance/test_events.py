"""The run speaks in events (issue 67): run() tells its handlers each event, in order, and the
reports are handlers of them (the progress display, the baseline, the files, the summary)."""

from __future__ import annotations

import httpx

from conformance.checks import REGISTRY
from conformance.engine.config import RunConfig
from conformance.engine.events import (
    CheckFinished,
    CheckStarted,
    Event,
    ExchangeSeen,
    FindingMade,
    RunFinished,
    RunStarted,
)
from conformance.engine.registry import select
from conformance.engine.runner import run
from gallery.breaker import Breaker
from mock_server import create_app
from mock_server.config import MockConfig
from mock_server.testing import URL

BREAK = "missing_x_request_id"  # the mock's answers without X-Request-ID: headers:* find it


def test_a_run_tells_each_event_in_order_each_exchange_and_finding_within_its_check() -> None:
    app = Breaker(create_app(MockConfig()))
    app.mode = BREAK
    config = RunConfig(URL, "k", select=("headers:*", "routes:*"))
    events: list[Event] = []
    report = run(
        config,
        select(REGISTRY, config),
        handlers=[events.append],
        transport=httpx.WSGITransport(app),
    )
    assert isinstance(events[0], RunStarted) and events[-1] == RunFinished(report)
    assert [c.id for c in events[0].checks] == [r.id for r in report.results]
    running = None
    told: dict[str, list[object]] = {}
    for event in events[1:-1]:
        if isinstance(event, CheckStarted):
            assert running is None
            running, told[event.check.id] = event.check.id, []
        elif isinstance(event, CheckFinished):
            assert event.check.id == running
            running = None
            assert told[event.check.id] == [f.message for f in event.result.findings]
        elif isinstance(event, ExchangeSeen):
            assert event.check_id == running
        else:
            assert isinstance(event, FindingMade) and event.check.id == running
            told[event.check.id].append(event.finding.message)
    # each check started and ended once (in the run's order: the least costly first)
    assert running is None and sorted(told) == sorted(r.id for r in report.results)
    found = {i for i, messages in told.items() if messages}
    assert found == {r.id for r in report.failed} and found  # the break was found: findings told
    exchanges = [e for e in events if isinstance(e, ExchangeSeen)]
    assert exchanges and {e.path for e in exchanges} >= {"/v1/models"}
