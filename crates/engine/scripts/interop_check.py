#!/usr/bin/env python3
"""Bar 5: checks that Ferry's built-in engine writes models other tools read the same way.

Loads every model listed in MANIFEST_DIR/manifest.json (written by
`cargo run -p ferry-engine --example interop_export -- MANIFEST_DIR`) with
transformers.AutoModelForCausalLM, applies its LoRA adapter with peft.PeftModel when it has
one, computes fp32 logits for the engine's input ids and prints the max abs difference to
the logits the engine computed. Also checks the tokenizer: transformers' tokenization of the
manifest's text must equal the engine's ids. Exits 1 when any difference exceeds --tol.

    pip install torch transformers peft safetensors
    python3 crates/engine/scripts/interop_check.py MANIFEST_DIR
"""
import argparse
import json
import sys
from pathlib import Path

import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("root", type=Path)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    manifest = json.loads((args.root / "manifest.json").read_text())
    worst = 0.0
    for entry in manifest["models"]:
        model_dir = args.root / entry["model"]
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
        if entry.get("adapter"):
            model = PeftModel.from_pretrained(model, args.root / entry["adapter"])
        model = model.to(args.device).eval()
        ref = load_file(str(args.root / entry["logits"]))
        ids = ref["input_ids"].to(args.device)
        with torch.no_grad():
            out = model(input_ids=ids).logits[0].float().cpu()
        diff = (out - ref["logits"]).abs().max().item()
        worst = max(worst, diff)
        tok = AutoTokenizer.from_pretrained(model_dir)
        hf_ids = tok(manifest["text"], add_special_tokens=False)["input_ids"]
        same_ids = hf_ids == ref["input_ids"][0].tolist()
        kind = "PeftModel" if entry.get("adapter") else "AutoModelForCausalLM"
        print(f"{entry['name']:12s} {kind:22s} positions={out.shape[0]} vocab={out.shape[1]} "
              f"max_abs_diff={diff:.3e} tokenizer_ids_match={same_ids}")
        if not same_ids:
            worst = float("inf")
    ok = worst <= args.tol
    print(f"worst max_abs_diff={worst:.3e} tol={args.tol:g} -> {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
