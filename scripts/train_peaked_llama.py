#!/usr/bin/env python3
"""Train models/tiny-llama for a few minutes on the project's own documentation, offline.

    .venv-vllm/bin/python scripts/train_peaked_llama.py [--out models/peaked-llama] [--steps 300]

models/tiny-llama has random weights: its next token is near uniform over 128,256 ids, so
no sampling check meets a near tie and temperature shows nothing. This one has seen
every Markdown file of the repository (about 35,000 tokens) a few times: its next token
is peaked, as a real model's is, with now and then two tokens almost equally likely.
The same architecture, tokenizer and dtype as tiny-llama, so the reference serves it the
same way. Deterministic for a given torch build (fixed seed, one thread order).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SEQ, BATCH, LR = 128, 8, 3e-3


def corpus(tokenizer) -> list[int]:
    """Every tracked Markdown file, in a fixed order, each opened with BOS."""
    ids: list[int] = []
    for path in sorted(ROOT.glob("**/*.md")):
        if any(
            part.startswith(".") or part in ("models", "node_modules")
            for part in path.relative_to(ROOT).parts
        ):
            continue
        ids += tokenizer.encode(path.read_text(encoding="utf-8")).ids
    return ids


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=str(ROOT / "models" / "tiny-llama"))
    parser.add_argument("--out", default=str(ROOT / "models" / "peaked-llama"))
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args(argv)
    import torch
    from tokenizers import Tokenizer
    from transformers import LlamaForCausalLM

    base, out = Path(args.base), Path(args.out)
    if not (base / "model.safetensors").exists():
        print(f"train_peaked_llama: no {base} (run: bash scripts/setup_vllm.sh)", file=sys.stderr)
        return 2
    tokenizer = Tokenizer.from_file(str(base / "tokenizer.json"))
    data = torch.tensor(corpus(tokenizer), dtype=torch.long)
    torch.manual_seed(0)
    model = LlamaForCausalLM.from_pretrained(base, dtype=torch.float32)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=LR, total_steps=args.steps, pct_start=0.1
    )
    generator = torch.Generator().manual_seed(0)
    started = time.monotonic()
    for step in range(args.steps):
        starts = torch.randint(0, len(data) - SEQ - 1, (BATCH,), generator=generator)
        batch = torch.stack([data[s : s + SEQ] for s in starts])
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        if step % 25 == 0 or step == args.steps - 1:
            print(
                f"step {step}: loss {loss.item():.3f} ({time.monotonic() - started:.0f} s)",
                flush=True,
            )
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model.to(torch.bfloat16).save_pretrained(tmp, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(base / name, tmp / name)
    config = json.loads((tmp / "config.json").read_text())
    config["dtype"] = "bfloat16"
    (tmp / "config.json").write_text(json.dumps(config, indent=2))
    (tmp / "TRAINED.json").write_text(
        json.dumps(
            {
                "tokens": len(data),
                "steps": args.steps,
                "seq": SEQ,
                "batch": BATCH,
                "final_loss": round(loss.item(), 3),
            }
        )
    )
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    print(
        f"train_peaked_llama: {len(data)} tokens, {args.steps} steps, loss {loss.item():.3f}: wrote {out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
