"""The tiny model's Hugging Face tokenizer encodes like quicktok's Llama 3 (the count
the core uses), checked in vLLM's interpreter, where transformers lives."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from reference_impl.launcher import default_python
from tests.support.reference import missing

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "make_tiny_llama.py"


@pytest.mark.vllm
def test_the_tiny_models_tokenizer_agrees_with_quicktok(tmp_path: Path) -> None:
    reason = missing()
    if reason:
        pytest.skip(reason)
    run = subprocess.run(
        [default_python(), str(SCRIPT), str(tmp_path), "--tokenizer-only", "--check"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "tokenizer check passed" in run.stdout
