"""LoRA parity between kbrl and PEFT on the tiny fixtures (ctest model:fresh_peft_parity).

For each model: (a) an adapter kbrl wrote loads into transformers + PEFT without warnings and
gives kbrl's logits; kbrl's merged export loads into transformers and gives them too; (b) an
adapter PEFT wrote (random non-zero B, rsLoRA, a subset of targets) loads into kbrl and gives
PEFT's logits. fp32, tolerance 1e-5 (max absolute logit difference). bf16 models with fp32
adapters (PEFT's autocast_adapter_dtype): the same logits bit for bit, since kbrl's fused
attention path runs transformers' ops in transformers' order on this machine. Training: the
gradients of sum(w * log p(target)) over a right-padded batch with respect to every adapter
tensor, kbrl's token_logprobs (plain and with checkpointed layers) vs PEFT's autograd, fp32,
bound 1e-4 relative to the largest gradient entry.

usage: peft_parity.py <lora_tool> <fixtures_dir> <scratch_dir>
"""
import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

TOLERANCE = 1e-5
MODELS = ["llama3_gqa", "qwen2_tied", "qwen3_gqa"]


def main() -> int:
    tool, fixtures, scratch = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    import peft
    import transformers

    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    torch.manual_seed(0)
    failures = []

    def check(what, diff):
        ok = diff <= TOLERANCE
        print(f"{what}: max |logit difference| {diff:.3g} {'ok' if ok else 'FAIL'}")
        if not ok:
            failures.append(what)

    for name in MODELS:
        model_dir = fixtures / name
        work = scratch / name
        work.mkdir()
        vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
        ids = torch.randint(0, vocab, (2, 9), generator=torch.Generator().manual_seed(1))
        save_file({"input_ids": ids}, str(work / "inputs.safetensors"))

        def base(dtype=torch.float32):
            return transformers.AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype).eval()

        def kbrl_logits(adapter, bf16=False):
            out = work / f"kbrl_logits_{adapter.name if adapter else 'base'}{'_bf16' if bf16 else ''}.safetensors"
            subprocess.run([tool, "logits", str(model_dir), str(adapter) if adapter else "-",
                            str(work / "inputs.safetensors"), str(out)] + (["bf16"] if bf16 else []), check=True)
            return load_file(str(out))["logits"]

        def check_bf16(what, adapter):
            model = peft.PeftModel.from_pretrained(base(torch.bfloat16), str(adapter)).eval()
            dtypes = {p.dtype for n, p in model.named_parameters() if "lora_" in n}
            if dtypes != {torch.float32}:
                failures.append(f"{what}: PEFT's adapters are {dtypes}, not float32")
            with torch.no_grad():
                reference = model(ids).logits
            diff = (kbrl_logits(adapter, bf16=True).float() - reference.float()).abs().max().item()
            ok = diff == 0.0
            print(f"{what}: max |logit difference| {diff:.3g} {'ok (bit for bit)' if ok else 'FAIL'}")
            if not ok:
                failures.append(what)

        # (a) kbrl's adapter in PEFT, kbrl's merged export in transformers.
        subprocess.run([tool, "make", str(model_dir), str(work / "kbrl")], check=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = peft.PeftModel.from_pretrained(base(), str(work / "kbrl" / "adapter")).eval()
        peft_warnings = [str(w.message) for w in caught if "peft" in (w.filename or "")]
        if peft_warnings:
            print(f"{name}: PEFT warned loading kbrl's adapter: {peft_warnings}")
            failures.append(f"{name} peft warnings")
        with torch.no_grad():
            reference = model(ids).logits
        ours = kbrl_logits(work / "kbrl" / "adapter")
        changed = (reference - base()(ids).logits).abs().max().item()
        print(f"{name}: the adapter moves the logits by up to {changed:.3g}")
        if changed < 1e-2:
            failures.append(f"{name} adapter has no effect")
        check(f"{name} kbrl adapter, kbrl vs PEFT", (ours - reference).abs().max().item())
        merged = transformers.AutoModelForCausalLM.from_pretrained(str(work / "kbrl" / "merged"),
                                                                   dtype=torch.float32).eval()
        with torch.no_grad():
            check(f"{name} merged export in transformers vs PEFT", (merged(ids).logits - reference).abs().max().item())
        check_bf16(f"{name} kbrl adapter, bf16 model, kbrl vs PEFT", work / "kbrl" / "adapter")

        # (b) PEFT's adapter in kbrl.
        config = peft.LoraConfig(r=3, lora_alpha=5, use_rslora=True, lora_dropout=0.1, task_type="CAUSAL_LM",
                                 target_modules=["q_proj", "v_proj", "o_proj", "down_proj"])
        model = peft.get_peft_model(base(), config)
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if "lora_B" in pname:
                    p.copy_(torch.randn_like(p) * 0.2)
        model.save_pretrained(str(work / "peft"))
        model.eval()
        with torch.no_grad():
            reference = model(ids).logits
        check(f"{name} PEFT adapter, kbrl vs PEFT", (kbrl_logits(work / "peft") - reference).abs().max().item())
        check_bf16(f"{name} PEFT adapter, bf16 model, kbrl vs PEFT", work / "peft")

        # Gradients through token_logprobs vs PEFT's autograd, on PEFT's adapter.
        mask = torch.ones_like(ids)
        mask[1, -3:] = 0  # right padding: real positions compute what they compute alone
        targets = torch.roll(ids, -1, 1)
        weights = torch.randn(ids.shape, generator=torch.Generator().manual_seed(2))
        save_file({"input_ids": ids, "attention_mask": mask, "targets": targets, "weights": weights},
                  str(work / "train_inputs.safetensors"))
        model = peft.PeftModel.from_pretrained(base(), str(work / "peft"), is_trainable=True).eval()
        logprobs = torch.log_softmax(model(ids, attention_mask=mask).logits.float(), -1)
        logprobs = logprobs.gather(2, targets.unsqueeze(2)).squeeze(2) * mask
        (logprobs * weights).sum().backward()
        reference = {n.replace(".default", ""): p.grad for n, p in model.named_parameters() if p.requires_grad}
        for mode in ["plain", "checkpoint"]:
            out = work / f"kbrl_grads_{mode}.safetensors"
            subprocess.run([tool, "grads", str(model_dir), str(work / "peft"), str(work / "train_inputs.safetensors"),
                            str(out)] + (["checkpoint"] if mode == "checkpoint" else []), check=True)
            ours = load_file(str(out))
            lp_diff = (ours["logprobs"] - logprobs.detach()).abs().max().item()
            names = sorted(reference)
            missing = [n for n in names if n not in ours]
            if missing or len(names) != len(ours) - 2:
                failures.append(f"{name} gradients: keys differ ({missing[:3]})")
                continue
            scale = max(reference[n].abs().max().item() for n in names)
            worst = max((ours[n] - reference[n]).abs().max().item() for n in names)
            ok = worst <= 1e-4 * scale and lp_diff <= TOLERANCE
            print(f"{name} gradients ({mode}, {len(names)} tensors): max |difference| {worst:.3g} "
                  f"(largest entry {scale:.3g}), logprobs {lp_diff:.3g} {'ok' if ok else 'FAIL'}")
            if not ok:
                failures.append(f"{name} gradients {mode}")

    if failures:
        print("FAILED:", ", ".join(failures))
        return 1
    print("all parity checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
