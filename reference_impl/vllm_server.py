"""`python -m reference_impl.vllm_server ARGS`: vLLM's OpenAI server, plus activations in completion streams.

Runs in vLLM's interpreter (.venv-vllm), so it imports only the standard
library, vLLM and vllm-lens. ARGS are vLLM's own
(`python -m vllm.entrypoints.openai.api_server --help`).

vllm-lens attaches the captured residual stream to the request's last output
and adds it to Completions and to chat streams, but not to completion streams.
This wraps vLLM's completion stream generator the way vllm-lens wraps the chat
one: it keeps the last output of each prompt and, when the stream ends
without an error, sends `data: {"activations": {"residual_stream": ...}}`
before `data: [DONE]`, in vllm-lens's own encoding. The patch lives in the API
server's process, which is where the generator runs (one API server process,
vLLM's default).
"""
from __future__ import annotations

import json
import runpy
from collections.abc import AsyncIterator
from typing import Any

DONE = "data: [DONE]\n\n"
ERROR = 'data: {"error"'


def install() -> None:
    """Wrap OpenAIServingCompletion.completion_stream_generator (idempotent)."""
    from vllm.entrypoints.openai.completion.serving import OpenAIServingCompletion
    from vllm_lens._activations_plugin import _serialize_activations_for

    original = OpenAIServingCompletion.completion_stream_generator
    if getattr(original, "_with_activations", False):
        return

    async def completion_stream_generator(self: Any, request: Any, engine_inputs: Any,
                                          result_generator: AsyncIterator[Any], *args: Any,
                                          **kwargs: Any) -> AsyncIterator[str]:
        last: dict[int, Any] = {}

        async def capturing(gen: AsyncIterator[Any]) -> AsyncIterator[Any]:
            async for prompt_idx, output in gen:
                last[prompt_idx] = output
                yield prompt_idx, output

        failed = False
        async for chunk in original(self, request, engine_inputs, capturing(result_generator),
                                    *args, **kwargs):
            failed = failed or chunk.startswith(ERROR)
            if chunk == DONE and not failed:
                # vllm-lens attaches one capture per response (the API allows one prompt).
                for output in (last[i] for i in sorted(last)):
                    serialized = _serialize_activations_for(output)
                    if serialized is not None:
                        yield f"data: {json.dumps({'activations': serialized})}\n\n"
                        break
            yield chunk

    completion_stream_generator._with_activations = True  # type: ignore[attr-defined]
    OpenAIServingCompletion.completion_stream_generator = completion_stream_generator


def main() -> None:
    install()
    runpy.run_module("vllm.entrypoints.openai.api_server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
