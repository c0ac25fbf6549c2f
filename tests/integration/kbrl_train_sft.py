#!/usr/bin/env python3
"""kbrl-train's supervised mode (train.mode=sft) against transformers + PEFT, and an RL run that
starts from its adapter, on the CPU with the demo policy (scripts/make_demo_model.py).

1. Parity. A PEFT adapter with random non-zero B (written by PEFT) is the starting point of a
   two-step kbrl-train SFT run on chat messages (sft.format=messages, the whole set as one batch,
   a held-out file). The same loss is computed here with transformers + PEFT: the prompts rendered
   by the tokenizer's own chat template, the answer and <|im_end|> after it, the token-mean
   negative log-likelihood of the answer tokens only; then torch's clip_grad_norm_ and AdamW with
   the run's settings. Each step's loss (before its update), gradient norm and held-out loss (after
   it), every example's token counts and loss, and the adapter after the two steps must agree.
2. Two ranks under torchrun (the store backend) train what one rank does: metrics and every
   example's loss within 1e-5, and refuse to resume on one rank.
3. The CPU demo's own config (examples/configs/cpu_demo.yaml train.mode=sft): corpus pairs asked as
   the RL run asks them; then a GRPO step of the same file with lora.init_adapter=<that run's
   directory>: the run records the adapter folder it resolved, and with learning rate 0 its
   checkpointed adapter is the supervised one, tensor for tensor.

    kbrl_train_sft.py --train <kbrl-train> --source <repo> --model <demo model> --work <scratch dir>
                      [--part parity|demo|ranks ...]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

FAILURES = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def close(a, b, rel):
    return abs(a - b) <= rel * max(1.0, abs(b))


def run(args, *cmd):
    r = subprocess.run([args.train, *cmd], capture_output=True, text=True, cwd=args.source, timeout=600)
    if r.returncode != 0:
        print(r.stdout[-2000:], r.stderr[-4000:])
    return r


TOPICS = ["relu", "gelu", "softmax", "layer norm", "matmul", "conv2d", "cumsum", "argmax"]


def conversation(i):
    topic = TOPICS[i % len(TOPICS)]
    return [{"role": "system", "content": "You are a kernel engineer."},
            {"role": "user", "content": f"Which kernel computes {topic} for batch {i}?"},
            {"role": "assistant", "content": f"<KERNEL>\nclass ModelNew:  # {topic}, batch {i}\n    pass\n</KERNEL>"}]


def write_messages(path, indices):
    with open(path, "w") as f:
        for i in indices:
            f.write(json.dumps({"id": f"m{i}", "messages": conversation(i)}) + "\n")


def parity(args):
    import torch
    import peft
    import transformers
    from safetensors.torch import load_file

    work = os.path.join(args.work, "parity")
    os.makedirs(work)
    train_file, heldout_file = os.path.join(work, "train.jsonl"), os.path.join(work, "heldout.jsonl")
    write_messages(train_file, range(6))
    write_messages(heldout_file, range(6, 8))

    torch.manual_seed(0)
    base = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    model = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=targets))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.05)
    adapter = os.path.join(work, "init_adapter")
    model.save_pretrained(adapter)

    lr, steps = 1e-3, 2
    run_dir = os.path.join(work, "run")
    r = run(args, f"log_path={run_dir}", f"model.path={args.model}", "model.device=cpu", "model.dtype=fp32",
            "train.mode=sft", "sft.format=messages", f"sft.data=[{train_file}]", f"sft.heldout_data=[{heldout_file}]",
            "sft.batch_size=6", f"sft.max_steps={steps}", "sft.shuffle=false", f"lora.init_adapter={adapter}",
            f"train.learning_rate={lr}", "train.grad_clip=1.0", "eval_every=1")
    check(r.returncode == 0, "parity: kbrl-train sft exits 0")
    if r.returncode != 0:
        return
    metrics = read_jsonl(os.path.join(run_dir, "metrics.jsonl"))
    traces = read_jsonl(os.path.join(run_dir, "traces.jsonl"))
    check(len(metrics) == steps, f"parity: {steps} metrics lines")

    # The reference: the chat template's prompt, the answer, the end of the turn; loss on the answer.
    tok = transformers.AutoTokenizer.from_pretrained(args.model)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")

    def sequence(i):
        conv = conversation(i)
        prompt = tok.apply_chat_template(conv[:-1], add_generation_prompt=True, tokenize=False)
        return (tok(prompt, add_special_tokens=False).input_ids,
                tok(conv[-1]["content"], add_special_tokens=False).input_ids + [im_end])

    train_seqs = {f"m{i}": sequence(i) for i in range(6)}
    heldout_seqs = {f"m{i}": sequence(i) for i in range(6, 8)}
    step0 = {t["example"]: t for t in traces if t["step"] == 0 and t["split"] == "train"}
    check(sorted(step0) == sorted(train_seqs), "parity: a trace line per training example at step 0")
    check(all(step0[k]["prompt_tokens"] == len(p) and step0[k]["answer_tokens"] == len(a)
              for k, (p, a) in train_seqs.items() if k in step0),
          "parity: kbrl's prompt and answer tokens are the chat template's and the tokenizer's")

    model = peft.PeftModel.from_pretrained(
        transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32), adapter, is_trainable=True)
    model.eval()  # no dropout (the adapter has none either)
    params = [p for n, p in model.named_parameters() if p.requires_grad]

    def losses(seqs, grad):
        per, total_nll, total_tokens = {}, 0.0, 0
        with torch.set_grad_enabled(grad):
            for key, (p, a) in seqs.items():
                ids = torch.tensor([p + a])
                logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
                lp = logp.gather(1, ids[0, 1:].unsqueeze(1)).squeeze(1)[len(p) - 1:]  # the answer's tokens
                nll = -lp.sum()
                per[key] = nll.item() / len(a)
                total_nll = total_nll + nll
                total_tokens += len(a)
        return total_nll / total_tokens, per

    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
    for s in range(steps):
        loss, per = losses(train_seqs, True)
        got = metrics[s]["sft/loss"]
        check(close(got, loss.item(), 2e-5), f"parity: step {s} loss {got:.7f} vs transformers+PEFT {loss.item():.7f}")
        if s == 0:
            worst = max(abs(step0[k]["loss"] - v) for k, v in per.items())
            check(worst < 1e-4, f"parity: step 0's per-example losses (max difference {worst:.2g})")
        opt.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0).item()
        got = metrics[s]["sft/grad_norm"]
        check(close(got, norm, 1e-4), f"parity: step {s} gradient norm {got:.6f} vs {norm:.6f}")
        opt.step()
        held, _ = losses(heldout_seqs, False)
        got = metrics[s]["sft/heldout_loss"]
        check(close(got, held.item(), 2e-5), f"parity: held-out loss after step {s}: {got:.7f} vs {held.item():.7f}")
    check(metrics[1]["sft/loss"] < metrics[0]["sft/loss"], "parity: the step lowered the training loss")

    # The adapters after the two steps, tensor for tensor (PEFT's key names in both).
    ours = load_file(os.path.join(run_dir, "checkpoints/step_000002/adapter/adapter_model.safetensors"))
    theirs = {k: v.detach() for k, v in peft.get_peft_model_state_dict(model).items()}
    check(sorted(ours) == sorted(theirs), f"parity: the adapter's tensors ({len(ours)})")
    if sorted(ours) == sorted(theirs):
        diff = max((ours[k] - theirs[k]).abs().max().item() for k in ours)
        moved = max((ours[k] - load_file(os.path.join(adapter, "adapter_model.safetensors"))[k]).abs().max().item()
                    for k in ours)
        check(diff < 1e-5 and moved > 1e-3, f"parity: the trained adapter is PEFT's (max difference {diff:.2g}; "
                                            f"it moved {moved:.2g})")


def demo(args):
    from safetensors.numpy import load_file

    config = os.path.join(args.source, "examples/configs/cpu_demo.yaml")
    sft = os.path.join(args.work, "demo-sft")
    r = run(args, config, f"model.path={args.model}", "train.mode=sft", f"log_path={sft}", "sft.max_steps=1",
            "sft.batch_size=2")
    check(r.returncode == 0, "demo config: the supervised step exits 0")
    if r.returncode != 0:
        return
    data = json.load(open(os.path.join(sft, "sft_data.json")))
    check(data["train_examples"] == 14 and data["heldout_examples"] == 2,
          f"demo config: 14 training and 2 held-out pairs ({data['train_examples']}, {data['heldout_examples']})")
    traces = read_jsonl(os.path.join(sft, "traces.jsonl"))
    check(all(t["prompt_tokens"] > 1000 for t in traces), "demo config: the prompts are the RL task prompts")
    m = read_jsonl(os.path.join(sft, "metrics.jsonl"))
    check(len(m) == 1 and "sft/heldout_loss" in m[0], "demo config: one step with its held-out loss")

    rl = os.path.join(args.work, "demo-rl")
    r = run(args, config, f"model.path={args.model}", f"log_path={rl}", f"lora.init_adapter={sft}",
            "dataset.max_steps=1", "dataset.batch_size=1", "dataset.group_size=2", "sampling.max_tokens=8",
            "train.learning_rate=0")
    check(r.returncode == 0, "RL from the supervised run: exits 0")
    if r.returncode != 0:
        return
    adapter = os.path.join(sft, "checkpoints/step_000001/adapter")
    check(f'init_adapter: "{adapter}"' in open(os.path.join(rl, "config.yaml")).read(),
          "RL from the supervised run: config.yaml names the adapter folder it resolved")
    a = load_file(os.path.join(adapter, "adapter_model.safetensors"))
    b = load_file(os.path.join(rl, "checkpoints/step_000001/adapter/adapter_model.safetensors"))
    check(sorted(a) == sorted(b) and all((a[k] == b[k]).all() for k in a),
          "RL from the supervised run: it trained the supervised adapter (unchanged at learning rate 0)")


def ranks(args):
    work = os.path.join(args.work, "ranks")
    os.makedirs(work)
    train_file, heldout_file = os.path.join(work, "train.jsonl"), os.path.join(work, "heldout.jsonl")
    write_messages(train_file, range(6))
    write_messages(heldout_file, range(6, 8))
    common = [f"model.path={args.model}", "model.device=cpu", "model.dtype=fp32", "train.mode=sft", "sft.format=messages",
              f"sft.data=[{train_file}]", f"sft.heldout_data=[{heldout_file}]", "sft.batch_size=5", "sft.max_steps=3",
              "eval_every=1", "train.learning_rate=1e-2"]
    one, two = os.path.join(work, "one"), os.path.join(work, "two")
    r1 = run(args, f"log_path={one}", *common)
    r = subprocess.run([args.python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "--no-python",
                        args.train, f"log_path={two}", *common], capture_output=True, text=True, cwd=args.source,
                       timeout=600)
    if r.returncode != 0:
        print(r.stdout[-2000:], r.stderr[-4000:])
    check(r1.returncode == 0 and r.returncode == 0, "two ranks: both runs exit 0")
    if r1.returncode != 0 or r.returncode != 0:
        return
    want, got = read_jsonl(os.path.join(one, "metrics.jsonl")), read_jsonl(os.path.join(two, "metrics.jsonl"))
    differ = [(w["step"], k) for w, g in zip(want, got) for k in w
              if not k.startswith("time/") and not close(g.get(k, float("nan")), w[k], 1e-5)]
    check(len(got) == 3 and not differ, f"two ranks (3 and 2 examples of each batch): one rank's metrics ({differ[:4]})")
    t1, t2 = read_jsonl(os.path.join(one, "traces.jsonl")), read_jsonl(os.path.join(two, "traces.jsonl"))
    check([(t["step"], t["split"], t["example"]) for t in t1] == [(t["step"], t["split"], t["example"]) for t in t2]
          and all(close(a["loss"], b["loss"], 1e-5) for a, b in zip(t1, t2)),
          "two ranks: every example's trace line, in one rank's order")
    check([c["world_size"] for c in read_jsonl(os.path.join(two, "checkpoints.jsonl"))] == [2, 2, 2],
          "two ranks: the checkpoints record the world size")
    r = run(args, f"log_path={two}", "sft.max_steps=4")
    check(r.returncode != 0 and "resumes only on as many" in r.stderr, "two ranks: a resume on one rank is refused")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--part", action="append", choices=["parity", "demo", "ranks"],
                    help="what to check (repeatable; default: all)")
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    parts = args.part or ["parity", "demo", "ranks"]
    for name, part in [("parity", parity), ("demo", demo), ("ranks", ranks)]:
        if name in parts:
            part(args)
    print(f"{len(FAILURES)} failure(s)")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
