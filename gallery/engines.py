"""Engines other than the fake one, behind the API layer (api_server.Engine): one that fails,
before its first event or after some; one held before its first event; one that plays back what
another answered; one never ready; one that steps given choice lengths as a batch would."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

from api_server.engine import Batches, ChoiceDelta, Engine, Event, Usage
from contract import CompletionRequest, spec
from mock_server.engine.fake_engine import FakeEngine


class BrokenEngine(Engine):
    def __init__(self, error: Exception, after: int = 0) -> None:
        self.error, self.after = error, after

    def generate(self, req: CompletionRequest, request_id: str) -> Iterator[Any]:
        yield from list(FakeEngine(spec()).generate(req, request_id))[: self.after]
        raise self.error


class BrokenFakeEngine(FakeEngine):
    """A FakeEngine, so the route runs it in the request's thread (no latency): an error
    still becomes an HTTP error before the first event and an error event after it."""

    def __init__(self, error: Exception, after: int = 0) -> None:
        super().__init__(spec())
        self.error, self.after = error, after

    def generate(self, req: CompletionRequest, request_id: str) -> Iterator[Any]:
        yield from list(super().generate(req, request_id))[: self.after]
        raise self.error


class GatedEngine(Engine):
    """The fake engine, held before its first event until `go` is set (a slow first token)."""

    def __init__(self) -> None:
        self.go = threading.Event()

    def generate(self, req: CompletionRequest, request_id: str) -> Iterator[Any]:
        if not self.go.wait(60):
            raise RuntimeError("the test never let the engine go")
        yield from FakeEngine(spec()).generate(req, request_id)


class Replay(Engine):
    """What `source` answered the first time a request came, played back after."""

    def __init__(self, source: Engine) -> None:
        self.source = source
        self.tapes: dict[str, list[Event]] = {}

    def generate(self, req: CompletionRequest, request_id: str) -> Iterator[Event]:
        # The body, and the max_tokens it runs with (the Budget may have clamped it).
        key = json.dumps([req.body, req.max_tokens], sort_keys=True)
        tape = self.tapes.get(key)
        if tape is None:  # a source's error is not recorded: it reaches the app as raised
            tape = self.tapes[key] = list(self.source.generate(req, request_id))
        return iter(tape)

    def ready(self) -> bool:
        return self.source.ready()


class Down(Replay):
    def ready(self) -> bool:
        return False


class Stepped(Engine):
    """Choices of the given lengths, one token each a step, round robin, as a batch would."""

    never_waits = True

    def __init__(self, lengths: list[int]) -> None:
        self.lengths = lengths

    def generate(self, req: CompletionRequest, request_id: str) -> Iterator[Event]:
        for step in range(max(self.lengths)):
            for j, k in enumerate(self.lengths):
                if step < k:
                    yield ChoiceDelta(j, "x", [7], finish_reason="stop" if step == k - 1 else None)
        yield Usage(sum(req.prompt_token_counts), sum(self.lengths))

    def stream(self, req: CompletionRequest, request_id: str, interval: float) -> Batches:
        batch: list[Event] = []
        for event in self.generate(req, request_id):
            batch.append(event)
            if isinstance(event, ChoiceDelta) and event.index == len(self.lengths) - 1:
                yield batch  # a step's tokens leave together
                batch = []
        yield batch
