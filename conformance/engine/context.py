"""What a check gets: the client, the server's facts, and assertions that record findings."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any, NoReturn

from conformance.engine.config import RunConfig
from conformance.engine.draws import Draws
from conformance.engine.results import Finding
from conformance.spec.bodies import REQUEST_ID_MASK, mask, request_id_re
from conformance.wire.client import Client, Reply
from conformance.wire.secrets import SECRETS
from contract import ModelInfo, Spec

# ctx.memo key: lines a check leaves for the report about requests the token ledger withheld.
LEDGER_NOTES = "ledger_notes"


class Skipped(Exception):
    """The check does not apply here; its text is the reason."""


class Unproven(Skipped):
    """The check cannot run because of what the server did (a premise it failed, a number it
    did not give): the run is not proven (exit code 3), never conformant."""


class Stop(Exception):
    """A finding makes the rest of the check meaningless (e.g. no 200, so no stream to read)."""


@dataclass
class ServerInfo:
    """What the server said before any check: each model of the spec with the deployment's
    max_model_len, num_layers and hidden_size from GET /v1/models (the spec's where it says
    none; `given` names those it said), and what GET /health answered, with the key and
    without it (None: no HTTP answer), which a check that ends "still healthy" expects again."""

    models: dict[str, ModelInfo]
    given: dict[str, frozenset[str]] = field(default_factory=dict)
    health: dict[bool, int | None] = field(default_factory=dict)


@dataclass
class Context:
    config: RunConfig
    client: Client
    server: ServerInfo
    memo: dict[Any, Any] = field(default_factory=dict)  # shared between checks of one run
    findings: list[Finding] = field(default_factory=list)  # of the check now running
    notes: list[str] = field(default_factory=list)  # of the check now running: see note()

    # -- facts -------------------------------------------------------------

    @property
    def api(self) -> Spec:
        """The spec the deployment is checked against (the run's, config.api)."""
        return self.config.api

    @property
    def model(self) -> ModelInfo:
        """The spec's model with the deployment's numbers from GET /v1/models (max_model_len,
        num_layers, hidden_size: the deployment's to set), which lens: and caps: checks use."""
        return self.server.models.get(self.config.model) or self.spec_model

    @property
    def spec_model(self) -> ModelInfo:
        """The model as openapi.yaml describes it (the numbers the golden cases assume)."""
        return self.api.models[self.config.model]

    def is_special(self, token: str) -> bool:
        """Whether a token's text is a special token's: x-models special_tokens lists it or
        special_token_pattern matches it (a sampled reserved token is in the tokens, not the
        text)."""
        return token in self._special_texts or bool(
            self._special_pattern and self._special_pattern.fullmatch(token)
        )

    @functools.cached_property
    def _special_texts(self) -> frozenset[str]:
        return frozenset(self.api.special_tokens(self.config.model).values())

    @functools.cached_property
    def _special_pattern(self) -> re.Pattern[str] | None:
        pattern = self.api.special_token_pattern(self.config.model)
        return None if pattern is None else re.compile(pattern)

    @property
    def max_model_len(self) -> int:
        """The deployment's, from GET /v1/models (it is the deployment's to set); the spec's
        where the server gave none (`given`)."""
        return self.model.max_model_len

    @functools.cached_property
    def draws(self) -> Draws:
        """The values of this run a server could key on, drawn from the run's seed."""
        assert self.config.seed is not None  # RunConfig draws one
        return Draws.of(self.config.seed)

    def given(self, number: str) -> bool:
        """Whether GET /v1/models gave this number of the model (else it is the spec's)."""
        return number in self.server.given.get(self.config.model, frozenset())

    def need_given(self, number: str, what: str) -> None:
        """Skip a check whose requests are sized by a number the server never gave: the spec's
        would size them for a deployment this may not be (a 131,072-token prompt to a
        2,048-token server)."""
        if not self.given(number):
            self.unproven(
                f"{what} is sized by the deployment's {number}, which GET /v1/models does not give "
                f"within the Model schema's bounds (the spec's is {getattr(self.spec_model, number)}; "
                "routes:models reports it)"
            )

    # -- outcomes ----------------------------------------------------------

    def skip(self, reason: str) -> NoReturn:
        """Not applicable, by the profile's, the options' or the deployment's own choice (its
        max_model_len, its model's layers): neutral."""
        raise Skipped(reason)

    def unproven(self, reason: str) -> NoReturn:
        """Not run because of what the server did: the run is not proven."""
        raise Unproven(reason)

    def note(self, text: str) -> None:
        """What a check that passes could not make certain (the reason of its PASSED result, in
        every report): a weaker pass said, never hidden."""
        self.notes.append(text)

    def fail(
        self,
        message: str,
        *,
        expected: Any = None,
        received: Any = None,
        reply: Reply | None = None,
    ) -> None:
        self.findings.append(
            Finding(message, expected, received, reply.exchange if reply else None)
        )

    def warn(
        self,
        message: str,
        *,
        expected: Any = None,
        received: Any = None,
        reply: Reply | None = None,
    ) -> None:
        """A finding of the front class (conformance/README.md, "A front's own words"): it
        leaves the check WARNED, and fails it only under --strict."""
        self.findings.append(
            Finding(message, expected, received, reply.exchange if reply else None, warning=True)
        )

    def stop(self, message: str, **kw: Any) -> NoReturn:
        self.fail(message, **kw)
        raise Stop(message)

    def expect_object(self, reply: Reply) -> dict[str, Any]:
        """The answer's JSON object; where it has none (not JSON, or JSON of another type) the
        check stops on that finding, never on the suite's own error reading it."""
        if not isinstance(reply.data, dict):
            self.stop("the answer is not a JSON object", received=_summary(reply), reply=reply)
        return reply.data

    def expect(self, ok: bool, message: str, **kw: Any) -> bool:
        if not ok:
            self.fail(message, **kw)
        return ok

    def equal(self, what: str, expected: Any, received: Any, reply: Reply | None = None) -> bool:
        return self.expect(
            expected == received,
            f"{what} differs",
            expected=expected,
            received=received,
            reply=reply,
        )

    # -- responses ---------------------------------------------------------

    def responded(self, reply: Reply) -> None:
        """Stop the check if the request got no HTTP response at all."""
        if reply.status is None:
            self.stop(f"no HTTP response: {reply.error}", reply=reply)

    def expect_status(self, reply: Reply, status: int, *, fatal: bool = False) -> bool:
        self.responded(reply)
        words = said(reply) if reply.status != status else None
        ok = self.expect(
            reply.status == status,
            f"status {reply.status}, expected {status}" + (f"{SAYS}{words!r}" if words else ""),
            expected=status,
            received=_summary(reply),
            reply=reply,
        )
        if not ok and fatal:
            raise Stop("unexpected status")
        return ok

    def expect_request_id(self, reply: Reply, *, in_body: bool) -> None:
        """X-Request-Id on every response, in the spec's format; equal to the body's request_id."""
        header = reply.request_id_header
        pattern = request_id_re(self.api)
        self.expect(
            header is not None,
            "no X-Request-Id header",
            expected=pattern.pattern,
            received=None,
            reply=reply,
        )
        if header is not None:
            self.expect(
                bool(pattern.fullmatch(header)),
                "X-Request-Id is not in the spec's format",
                expected=pattern.pattern,
                received=header,
                reply=reply,
            )
        if not in_body:
            return
        body_id = reply.data.get("request_id") if isinstance(reply.data, dict) else None
        if (
            self.expect(
                isinstance(body_id, str) and bool(pattern.fullmatch(body_id)),
                "the body's request_id is missing or not in the spec's format",
                expected=pattern.pattern,
                received=body_id,
                reply=reply,
            )
            and header is not None
        ):
            self.expect(
                header == body_id,
                "X-Request-Id differs from the body's request_id",
                expected=body_id,
                received=header,
                reply=reply,
            )

    def expect_response(self, reply: Reply, status: int, body: dict[str, Any] | None) -> None:
        """Status, the whole body (request_id masked), and the request id rules."""
        self.expect_status(reply, status)
        if body is None:
            return
        if not reply.is_json:
            from conformance.wire.who_answered import who_answered

            who = who_answered(reply.headers, reply.content, reply.status, self.config.front)
            self.fail(
                f"the body is not JSON ({who})",
                expected=body,
                received=_summary(reply),
                reply=reply,
            )
            self.expect_request_id(reply, in_body=False)
            return
        received = mask(reply.data)
        self.equal("the body", body, received, reply)
        if isinstance(body, dict) and body.get("request_id") == REQUEST_ID_MASK:
            self.expect_request_id(reply, in_body=True)

    def expect_error(self, reply: Reply, body: dict[str, Any], status: int | None = None) -> None:
        from conformance.spec.bodies import status_of

        self.expect_response(reply, status or status_of(self.api, body["error"]["code"]), body)


SAID_CHARS = 160  # of a server's own message quoted in a finding's line
SAYS = ": the server says "


def said(reply: Reply) -> str | None:
    """The server's own words in a refusal: an error's message (the API's shape, or a
    `message` or `detail` of another), or the start of a text body; None for a success."""
    if reply.status is None or reply.status < 400:
        return None  # a success body is data, not words
    data = reply.data if reply.is_json else None
    if isinstance(data, dict):
        error = data.get("error")
        words = next(
            (
                w
                for w in (
                    error.get("message") if isinstance(error, dict) else error,
                    data.get("message"),
                    data.get("detail"),
                )
                if w
            ),
            None,
        )
        text = words if isinstance(words, str) else json.dumps(words) if words is not None else None
    elif reply.is_json or not reply.content:
        return None
    else:
        # the content is masked as it entered (Client); its head's cut may leave a piece
        text = SECRETS.tail(reply.content[: 4 * SAID_CHARS].decode("utf-8", "replace"))
        if not all(c.isprintable() or c.isspace() for c in text):
            return None  # binary: nothing a reader could read
    if text is None:
        return None
    text = " ".join(text.split())
    return text if len(text) <= SAID_CHARS else SECRETS.cut(text, SAID_CHARS) + "…"


def _summary(reply: Reply) -> Any:
    if reply.status is None:
        return {"error": reply.error}
    return {
        "status": reply.status,
        "body": reply.data if reply.is_json else reply.exchange.response_body,
    }
