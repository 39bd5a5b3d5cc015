"""vLLM's answer -> the engine protocol's events (ChoiceDelta, Usage, Activations).

vLLM streams chunks shaped like the API's; a chunk becomes the events the API
server builds its own chunks and Completion from (api_server/responses.py). Only fields that
openapi.yaml declares pass: vLLM's extras (system_fingerprint, metrics,
kv_transfer_params, ...) stay here, and `model` and `id` are the app's.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from api_server.engine import Activations, ChoiceDelta, Event, LogprobsDelta, Usage
from contract import CompletionRequest, Spec
from contract.tokens import decode
from reference_impl.errors import UpstreamError, error_status, from_vllm

DATA = b"data: "
DONE = b"[DONE]"
FINISH_REASONS = (None, "stop", "length")


@cache
def _tensor_fields(api: Spec) -> tuple[str, ...]:
    return tuple(api.schema("EncodedTensor")["properties"])


class SseData:
    """The data of each `data:` event of an SSE body, fed as it comes; `done` once
    `data: [DONE]` came (what follows it is not read)."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.searched = 0
        self.done = False

    def feed(self, chunk: bytes) -> list[bytes]:
        """The data of the events that `chunk` completes, up to `[DONE]` (excluded)."""
        if self.done:
            return []
        buffer = self.buffer
        if (
            not buffer
            and chunk.startswith(DATA)
            and chunk.find(b"\n") == len(chunk) - 2
            and chunk.endswith(b"\n\n")
        ):
            # vLLM sends each event as one chunk of its body, and a read usually gets it
            # whole: one data line and its blank line. It needs no buffer and no split.
            data = chunk[len(DATA) : -2].rstrip(b"\r")
            if data == DONE:
                self.done = True
                return []
            return [data]
        events: list[bytes] = []
        buffer += chunk
        while (end := buffer.find(b"\n\n", self.searched)) >= 0:
            events.append(bytes(buffer[:end]))
            del buffer[: end + 2]
            self.searched = 0
        # A large event (the activations) arrives in many pieces: search only the new tail.
        self.searched = max(0, len(buffer) - 1)
        out: list[bytes] = []
        for event in events:
            for line in event.split(b"\n"):
                line = line.rstrip(b"\r")
                if line.startswith(DATA):
                    data = line[len(DATA) :]
                    if data == DONE:
                        self.done = True
                        return out
                    out.append(data)
        return out


class Decoder:
    """Turns vLLM's chunks (or its whole Completion) for one request into events, as
    the API's spec `s` says them."""

    def __init__(self, req: CompletionRequest, api: Spec) -> None:
        self.req, self.api = req, api
        self.echo = bool(req.body.get("echo"))
        self.started: set[int] = set()

    def chunk(self, payload: Any, whole: bool = False) -> list[Event]:
        """The events of one streamed chunk, or of a whole Completion (vLLM without
        stream): deltas, then the usage, then the activations. Raises the API's
        error for an error event."""
        if not isinstance(payload, dict):
            raise UpstreamError(f"a chunk that is not a JSON object: {str(payload)[:200]}")
        if "error" in payload:
            raise from_vllm(error_status(payload), payload, self.api)
        try:
            choices = payload["choices"] if whole else payload.get("choices") or []
            events: list[Event] = [self._delta(c) for c in choices]
            usage = payload.get("usage")
            # Streamed, the usage comes in a chunk of its own (no continuous usage is asked for).
            if usage is not None and (whole or not choices):
                events.append(Usage(int(usage["prompt_tokens"]), int(usage["completion_tokens"])))
            elif whole:
                raise KeyError("usage")
            if payload.get("activations") is not None:
                events.append(self._activations(payload["activations"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise UpstreamError(f"an unexpected chunk ({exc!r}): {str(payload)[:200]}") from None
        return events

    def _delta(self, c: dict[str, Any]) -> ChoiceDelta:
        index = int(c["index"])
        finish = c.get("finish_reason")
        if finish not in FINISH_REASONS:  # "abort" or "error": Inference gave up on it
            raise UpstreamError(f"choice {index} ended with finish_reason {finish!r}")
        text = c.get("text") or ""
        first = index not in self.started
        if first:
            self.started.add(index)
            if self.echo:
                text = self._echo_text(index) + text
        return ChoiceDelta(
            index,
            text,
            list(c.get("token_ids") or ()),
            _logprobs(c.get("logprobs")),
            finish,
            c.get("stop_reason"),
            prompt_token_ids=c.get("prompt_token_ids") if first else None,
            prompt_logprobs=c.get("prompt_logprobs") if first else None,
        )

    def _echo_text(self, index: int) -> str:
        """The prompt, as vLLM echoes it: a string as sent, token ids decoded (special
        tokens included). vLLM leaves it out when it returns token ids, which the
        API always asks for, so the API adds it."""
        p = index // self.req.n
        if self.req.prompt_texts is not None and "truncate_prompt_tokens" not in self.req.body:
            return self.req.prompt_texts[p]
        return decode(self.req.model, self.req.prompts[p])

    def _activations(self, payload: dict[str, Any]) -> Activations:
        tensor = payload["residual_stream"]
        # vllm-lens stacks the captured layers in ascending order.
        return Activations(
            sorted(self.req.body.get("output_residual_stream") or ()),
            {k: tensor[k] for k in _tensor_fields(self.api)},
        )


def _logprobs(lp: Any) -> LogprobsDelta | None:
    if lp is None:
        return None
    return LogprobsDelta(
        list(lp["tokens"]),
        list(lp["token_logprobs"]),
        list(lp["top_logprobs"]),
        list(lp["text_offset"]),
    )
