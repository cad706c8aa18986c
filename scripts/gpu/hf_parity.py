#!/usr/bin/env python3
"""Loads Hugging Face directories written by `ferry convert` with transformers (float32, eager
attention) and compares their logits with Megatron's own (reference.safetensors from
megatron_convert.py). Prints one JSON line per directory and writes them to --json; exits 1 when
any maximum absolute difference exceeds --bar (1e-3).

    python3 scripts/gpu/hf_parity.py --reference W/reference.safetensors W/hf-legacy W/hf-dist
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference", required=True)
    ap.add_argument("--bar", type=float, default=1e-3)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json")
    ap.add_argument("dirs", nargs="+")
    args = ap.parse_args()

    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    torch.backends.cuda.matmul.allow_tf32 = False
    ref = load_file(args.reference)
    ids, want = ref["input_ids"], ref["logits"].double()
    results, ok = [], True
    for d in args.dirs:
        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
        model.to(args.device).eval()
        with torch.no_grad():
            got = model(input_ids=ids.to(args.device)).logits.double().cpu()
        diff = (got - want).abs()
        r = {"dir": d, "architecture": type(model).__name__, "max_abs_diff": float(diff.max()),
             "mean_abs_diff": float(diff.mean()), "max_abs_reference": float(want.abs().max()),
             "argmax_agreement": float((got.argmax(-1) == want.argmax(-1)).double().mean()),
             "bar": args.bar, "ok": bool(diff.max() <= args.bar)}
        ok &= r["ok"]
        results.append(r)
        print("parity", json.dumps(r), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
