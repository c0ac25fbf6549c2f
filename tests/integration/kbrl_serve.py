#!/usr/bin/env python3
"""kbrl-serve end to end, driven by the official `openai` package, on the demo policy (a tiny
random Qwen2 checkpoint, scripts/make_demo_model.py) on the CPU:

- /v1/models lists the base model (and an adapter once loaded);
- chat completions: greedy answers repeat, seeded ones repeat, n = 2, usage and finish reasons;
- streaming: the deltas of a streamed chat (and completion) add up to the answer of the same
  request unstreamed, with a usage chunk last when asked;
- completions (text and token-id prompts) with logprobs;
- the greedy answer's tokens and logprobs are transformers' (argmax, log-softmax of the same model
  on the same tokens);
- stop strings cut the answer before the match;
- requests sent at once from several threads are answered exactly as each was alone (different
  max_tokens, stop strings, seeds, temperatures), and the server log shows one batch of them;
- continuous batching: a request sent while another of its distribution streams joins it, ends
  first, and both are answered exactly as alone;
- errors: malformed JSON, missing messages, wrong types, n < 1, temperature < 0, an unknown model,
  a prompt over the context, a wrong API key: each the right status and an OpenAI error object;
- /v1/load_lora_adapter with a PEFT adapter (random, made here by peft): requests naming it answer
  as peft's model does (greedy tokens and logprobs), unlike the base; the log shows the load;
  a second load under the name, a bad folder, /v1/unload_lora_adapter;
- kbrl's own client (`kbrl-eval model --endpoint`, net::OpenAiClient) samples a run from
  kbrl-serve, and running it again requests nothing new.

    kbrl_serve.py --serve <kbrl-serve> --eval <kbrl-eval> --source <repo> --work <scratch>
"""
import argparse
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

FAILURES = []
KEY = "sk-kbrl-serve-test"
SPECIALS = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}  # the demo tokenizer's special tokens


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


def make_adapter(model_dir, out):
    """A PEFT LoRA adapter with random A and B (init_lora_weights=False), so it changes the model."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    torch.manual_seed(1)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, init_lora_weights=False, task_type="CAUSAL_LM",
                        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    peft_model = get_peft_model(base, config)
    peft_model.save_pretrained(out)


class Reference:
    """The model as transformers (and peft) compute it, for the greedy and logprob checks."""

    def __init__(self, model_dir, adapter_dir):
        import torch
        from peft import PeftModel
        from transformers import AutoModelForCausalLM, AutoTokenizer
        self.torch = torch
        self.tok = AutoTokenizer.from_pretrained(model_dir)
        self.base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        tuned = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        self.tuned = PeftModel.from_pretrained(tuned, adapter_dir).eval()

    def chat_ids(self, messages):
        text = self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def token_logprobs(self, model, prompt, tokens):
        """log p(tokens[i] | prompt + tokens[:i]) and whether each token is the argmax there."""
        torch = self.torch
        with torch.no_grad():
            logits = model(torch.tensor([prompt + tokens])).logits[0].float()
        lp = torch.log_softmax(logits, -1)
        out, argmax = [], []
        for i, t in enumerate(tokens):
            row = lp[len(prompt) + i - 1]
            out.append(row[t].item())
            argmax.append(int(row.argmax().item()) == t)
        return out, argmax


def token_ids(logprob_content):
    return [int(c.token.split(":", 1)[1]) for c in logprob_content]


def raw(url, path, body, key=KEY, method="POST"):
    """A request with urllib: (status, parsed body or text)."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json", "Authorization": "Bearer " + key})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def is_error_object(body):
    return (isinstance(body, dict) and isinstance(body.get("error"), dict) and
            {"message", "type", "param", "code"} <= set(body["error"]))


class Server:
    def __init__(self, serve, model, work, *extra):
        self.log_path = os.path.join(work, "serve.log")
        port_file = os.path.join(work, "serve.port")
        if os.path.exists(port_file):
            os.remove(port_file)
        self.log = open(self.log_path, "w")
        env = dict(os.environ, KBRL_SERVE_TEST_KEY=KEY)
        self.proc = subprocess.Popen([serve, "--model", model, "--device", "cpu", "--listen", "127.0.0.1:0",
                                     "--port-file", port_file, "--api-key-env", "KBRL_SERVE_TEST_KEY", *extra],
                                    stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + 180
        while not os.path.exists(port_file):
            if self.proc.poll() is not None or time.time() > deadline:
                raise SystemExit("kbrl-serve did not start:\n" + self.text())
            time.sleep(0.1)
        with open(port_file) as f:
            self.url = "http://127.0.0.1:{}".format(int(f.read()))

    def text(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve", required=True)
    ap.add_argument("--eval", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    import openai

    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    model_dir = os.path.join(args.work, "demo")
    # A rare end of turn (0.2 % per token instead of 4 %): greedy answers then run for many tokens,
    # which the greedy, stop-string and batching checks need.
    subprocess.run([sys.executable, os.path.join(args.source, "scripts", "make_demo_model.py"), model_dir,
                    "--stop-probability", "0.002"], check=True, capture_output=True)
    adapter_dir = os.path.join(args.work, "adapter")
    make_adapter(model_dir, adapter_dir)
    ref = Reference(model_dir, adapter_dir)

    server = Server(args.serve, model_dir, args.work, "--batch-wait-ms", "300", "--max-batch", "32")
    try:
        run_checks(args, openai, server, ref, model_dir, adapter_dir)
    finally:
        code = server.stop()
        check(code == 0, "SIGTERM: kbrl-serve exits 0 (got {})".format(code))
        log = server.text()
        if FAILURES:
            print("---- kbrl-serve log (last 60 lines) ----\n" + "\n".join(log.splitlines()[-60:]))
    if FAILURES:
        print("{} check(s) failed".format(len(FAILURES)))
        sys.exit(1)
    print("all checks passed")


def run_checks(args, openai, server, ref, model_dir, adapter_dir):
    name = "demo"  # the checkpoint folder's name
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=120)
    user = [{"role": "user", "content": "Write a fast kernel for the row sum of squares."}]

    # Models.
    ids = [m.id for m in client.models.list().data]
    check(ids == [name], "/v1/models lists the base model under its folder's name: {}".format(ids))

    # Chat, greedy: repeatable, with usage and a finish reason.
    greedy = dict(model=name, messages=user, temperature=0, max_tokens=12)
    # With max_tokens 12: a long enough answer for the checks below to mean something.
    a = client.chat.completions.create(**greedy)
    b = client.chat.completions.create(**greedy)
    text = a.choices[0].message.content
    check(a.object == "chat.completion" and a.choices[0].message.role == "assistant" and isinstance(text, str),
          "a chat completion with an assistant message")
    check(a.usage.completion_tokens >= 6 and len(text) >= 6,
          "the greedy answer runs for several tokens ({} tokens, {!r})".format(a.usage.completion_tokens, text))
    check(text == b.choices[0].message.content, "greedy: the same request gives the same answer")
    check(a.choices[0].finish_reason in ("stop", "length"), "finish_reason is stop or length")
    u = a.usage
    check(u.prompt_tokens == len(ref.chat_ids(user)) and 1 <= u.completion_tokens <= 12 and
          u.total_tokens == u.prompt_tokens + u.completion_tokens,
          "usage: prompt tokens as transformers' chat template counts them, completion <= max_tokens, total")
    reason = a.choices[0].finish_reason
    check((reason == "length" and u.completion_tokens == 12) or (reason == "stop" and u.completion_tokens <= 12),
          "finish_reason 'length' at max_tokens, else 'stop' (a stop token)")

    # Seeds: repeatable at temperature 1; another seed answers otherwise.
    seeded = dict(model=name, messages=user, temperature=1.0, max_tokens=16, seed=1234)
    s1 = client.chat.completions.create(**seeded).choices[0].message.content
    s2 = client.chat.completions.create(**seeded).choices[0].message.content
    s3 = client.chat.completions.create(**dict(seeded, seed=99)).choices[0].message.content
    check(s1 == s2, "seed 1234 at temperature 1: the same answer twice")
    check(s1 != s3, "another seed: another answer")

    # n = 2.
    two = client.chat.completions.create(model=name, messages=user, temperature=1.0, max_tokens=16, n=2, seed=5)
    check([c.index for c in two.choices] == [0, 1], "n=2: two choices, indexed 0 and 1")
    check(two.choices[0].message.content != two.choices[1].message.content, "n=2: the two samples differ")
    check(two.usage.prompt_tokens == u.prompt_tokens, "n=2: the prompt is counted once")

    # Logprobs: the greedy tokens and their logprobs are transformers' on the same model.
    lp = client.chat.completions.create(**greedy, logprobs=True, extra_body={"return_tokens_as_token_ids": True})
    content = lp.choices[0].logprobs.content
    check(len(content) == lp.usage.completion_tokens, "one logprob per completion token")
    check(all(math.isfinite(c.logprob) and c.logprob <= 0 for c in content), "logprobs are finite and <= 0")
    check(lp.choices[0].message.content == text, "logprobs change nothing in the answer")
    gen = token_ids(content)
    want, argmax = ref.token_logprobs(ref.base, ref.chat_ids(user), gen)
    diff = max(abs(c.logprob - w) for c, w in zip(content, want))
    check(diff < 1e-4, "greedy logprobs match transformers' log-softmax (max diff {:.2e})".format(diff))
    check(all(argmax), "every greedy token is transformers' argmax")
    named = client.chat.completions.create(**greedy, logprobs=True, top_logprobs=0)
    nc = named.choices[0].logprobs.content
    check(len(nc) == len(content) and all(isinstance(c.token, str) and isinstance(c.bytes, list) for c in nc) and
          b"".join(bytes(c.bytes) for c in nc if c.token not in SPECIALS).decode("utf-8", "replace") == text,
          "logprob entries carry token text and bytes, whose concatenation is the answer")

    # Streaming: the deltas add up to the unstreamed answer; usage last.
    chunks = list(client.chat.completions.create(**greedy, stream=True, stream_options={"include_usage": True}))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    check(chunks and chunks[0].object == "chat.completion.chunk" and chunks[0].choices[0].delta.role == "assistant",
          "a stream starts with the assistant role")
    check(streamed == text, "streamed deltas add up to the unstreamed answer ({!r})".format(streamed[:40]))
    check(finish == [a.choices[0].finish_reason], "one final chunk carries the finish reason")
    check(chunks[-1].usage is not None and not chunks[-1].choices and
          chunks[-1].usage.completion_tokens == u.completion_tokens, "include_usage: a last chunk with the usage")
    many = list(client.chat.completions.create(model=name, messages=user, temperature=1.0, max_tokens=10, n=2, seed=5,
                                                stream=True))
    per = {0: "", 1: ""}
    for c in many:
        for ch in c.choices:
            per[ch.index] += ch.delta.content or ""
    whole = client.chat.completions.create(model=name, messages=user, temperature=1.0, max_tokens=10, n=2, seed=5)
    check([per[0], per[1]] == [c.message.content for c in whole.choices], "n=2 streamed: each choice's deltas add up")

    # Stop strings: the answer ends before the first match.
    if len(text) >= 6:
        stop = text[len(text) // 2:len(text) // 2 + 2]
        cut = client.chat.completions.create(**greedy, stop=[stop, "\x00never"])
        check(cut.choices[0].message.content == text[:text.find(stop)] and cut.choices[0].finish_reason == "stop",
              "stop {!r}: the answer ends before it, finish_reason stop".format(stop))
        scut = "".join(c.choices[0].delta.content or "" for c in
                       client.chat.completions.create(**greedy, stop=stop, stream=True) if c.choices)
        check(scut == text[:text.find(stop)], "stop while streaming: nothing past the cut is sent")
    else:
        check(False, "the greedy answer is long enough to test stop strings ({!r})".format(text))

    # Completions: text and token-id prompts, logprobs, streaming.
    prompt = "class ModelNew(nn.Module):"
    c1 = client.completions.create(model=name, prompt=prompt, max_tokens=8, temperature=0, logprobs=0)
    check(c1.object == "text_completion" and isinstance(c1.choices[0].text, str), "a text completion")
    clp = c1.choices[0].logprobs
    check(len(clp.tokens) == len(clp.token_logprobs) == c1.usage.completion_tokens and
          all(math.isfinite(x) for x in clp.token_logprobs), "completion logprobs: one finite value per token")
    prompt_ids = ref.tok(prompt, add_special_tokens=True)["input_ids"]
    check(c1.usage.prompt_tokens == len(prompt_ids), "the completion prompt is tokenized as transformers does")
    c2 = client.completions.create(model=name, prompt=prompt_ids, max_tokens=8, temperature=0)
    check(c2.choices[0].text == c1.choices[0].text, "a prompt of token ids answers as its text")
    cs = "".join(c.choices[0].text for c in client.completions.create(model=name, prompt=prompt, max_tokens=8,
                                                                      temperature=0, stream=True) if c.choices)
    check(cs == c1.choices[0].text, "streamed completion adds up to the unstreamed one")
    cd = client.completions.create(model=name, prompt=prompt, temperature=0)
    check(cd.usage.completion_tokens <= 16, "completions default to max_tokens 16")
    multi = client.completions.create(model=name, prompt=[prompt, "import torch"], max_tokens=4, temperature=0, n=2)
    check(len(multi.choices) == 4 and multi.choices[0].text == multi.choices[1].text,
          "two prompts x n=2: four choices, prompt-major")

    # Concurrency: requests sent at once are batched together and answered exactly as alone.
    variants = [
        dict(temperature=1.0, seed=11, max_tokens=5),
        dict(temperature=1.0, seed=12, max_tokens=14, stop=["e"]),
        dict(temperature=0, max_tokens=7),
        dict(temperature=0, max_tokens=3),
        dict(temperature=1.0, seed=13, max_tokens=9, n=2),
        dict(temperature=0.7, top_p=0.9, seed=14, max_tokens=6),
    ]
    requests = [dict(model=name, messages=[{"role": "user", "content": "Task {}: fuse the ops.".format(i)}],
                     logprobs=True, extra_body={"return_tokens_as_token_ids": True}, **v)
                for i, v in enumerate(variants)]

    def answer(r):
        out = client.chat.completions.create(**r)
        return [(c.message.content, c.finish_reason, token_ids(c.logprobs.content)) for c in out.choices]

    alone = [answer(r) for r in requests]
    batches_before = len(re.findall(r"batch of \d+ request", server.text()))
    together = [None] * len(requests)
    barrier = threading.Barrier(len(requests))

    def worker(i):
        barrier.wait()
        together[i] = answer(requests[i])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(all(t is not None for t in together), "six concurrent requests all answered")
    check(together == alone, "each concurrent request is answered exactly as it was alone")
    check(all(len(r[2]) <= v["max_tokens"] for rs, v in zip(alone, variants) for r in rs),
          "each request keeps its own max_tokens in a batch")
    # A batch's log line follows its answers: wait until the lines account for all six requests.
    deadline = time.time() + 30
    while True:
        sizes = [int(n) for n in re.findall(r"batch of (\d+) requests?", server.text())[batches_before:]]
        if sum(sizes) >= len(requests) or time.time() > deadline:
            break
        time.sleep(0.05)
    check(sizes and max(sizes) >= 3, "the server log shows the concurrent requests batched together: {}".format(sizes))

    # Continuous batching: a request sent while another of the same distribution is being
    # sampled joins it at the next step, finishes first, and both are answered as alone.
    long_r = dict(model=name, messages=[{"role": "user", "content": "Task 9: fuse all of the ops, in one kernel."}],
                  temperature=1.0, seed=21, max_tokens=240, logprobs=True,
                  extra_body={"return_tokens_as_token_ids": True})
    short_r = dict(requests[0], seed=22, max_tokens=4)
    long_alone, short_alone = answer(long_r), answer(short_r)
    check(len(long_alone[0][2]) >= 100, "the long request runs for {} tokens alone".format(len(long_alone[0][2])))
    joined_before = len(re.findall(r"joined while it ran", server.text()))
    sampling = threading.Event()  # set once the long request's tokens arrive: its batch has begun
    long_streamed = {}

    def stream_long():
        parts, ids = [], []
        for chunk in client.chat.completions.create(stream=True, **long_r):
            if chunk.choices:
                parts.append(chunk.choices[0].delta.content or "")
                if sum(1 for x in parts if x) >= 4:
                    sampling.set()
                if chunk.choices[0].logprobs:
                    ids += token_ids(chunk.choices[0].logprobs.content)
        long_streamed["answer"] = ("".join(parts), ids)
        long_streamed["end"] = time.time()

    t = threading.Thread(target=stream_long)
    t.start()
    check(sampling.wait(60), "the long request starts streaming")
    short_together = answer(short_r)
    short_end = time.time()
    t.join()
    check(short_together == short_alone, "a request that joined a running batch is answered as alone")
    check(long_streamed.get("answer") == (long_alone[0][0], long_alone[0][2]),
          "the running request is answered as alone after another joined it")
    check(short_end < long_streamed.get("end", 0), "the joining request finished while the long one still ran")
    deadline = time.time() + 30
    while len(re.findall(r"joined while it ran", server.text())) == joined_before and time.time() < deadline:
        time.sleep(0.05)
    check(len(re.findall(r"joined while it ran", server.text())) > joined_before,
          "the server log shows a request that joined a running batch")

    # Errors.
    bad = client.with_options(api_key="wrong-key")
    try:
        bad.models.list()
        check(False, "a wrong API key is refused")
    except openai.AuthenticationError as e:
        # The openai package keeps the "error" object of the body as e.body.
        check(e.status_code == 401 and is_error_object({"error": e.body}) and e.code == "invalid_api_key",
              "a wrong API key: 401 AuthenticationError with an OpenAI error object")
    status, body = raw(server.url, "/v1/chat/completions", b"{\"model\": \"demo\", \"messages\": [")
    check(status == 400 and is_error_object(body), "malformed JSON: 400 with an OpenAI error object")
    status, body = raw(server.url, "/v1/chat/completions", {"model": name})
    check(status == 400 and is_error_object(body) and body["error"]["param"] == "messages", "missing messages: 400, param messages")
    status, body = raw(server.url, "/v1/chat/completions", {"model": name, "messages": user, "temperature": "hot"})
    check(status == 400 and body["error"]["param"] == "temperature", "temperature of the wrong type: 400, param temperature")
    status, body = raw(server.url, "/v1/chat/completions", {"model": name, "messages": [{"role": "user", "content": 3}]})
    check(status == 400 and body["error"]["param"] == "messages[0].content", "content of the wrong type: 400 naming it")
    status, body = raw(server.url, "/v1/chat/completions", {"model": name, "messages": user, "max_tokens": 4,
                                                             "some_new_field": {"x": 1}})
    check(status == 200, "unknown fields are ignored")
    status, body = raw(server.url, "/v1/nothing", {})
    check(status == 404 and is_error_object(body), "an unknown route: 404 with an error object")
    for kwargs, param, what in [(dict(temperature=-1), "temperature", "temperature < 0"), (dict(n=0), "n", "n = 0"),
                                (dict(top_p=1.5), "top_p", "top_p > 1"), (dict(max_tokens=0), "max_tokens", "max_tokens 0")]:
        try:
            client.chat.completions.create(model=name, messages=user, **kwargs)
            check(False, what + " is refused")
        except openai.BadRequestError as e:
            check(e.status_code == 400 and e.body.get("param") == param, "{}: BadRequestError, param {}".format(what, param))
    try:
        client.chat.completions.create(model="no-such-model", messages=user)
        check(False, "an unknown model is refused")
    except openai.NotFoundError as e:
        check(e.status_code == 404 and e.body.get("code") == "model_not_found", "an unknown model: 404 model_not_found")
    try:
        client.chat.completions.create(model=name, messages=user, max_tokens=10 ** 6)
        check(False, "a request over the context is refused")
    except openai.BadRequestError as e:
        check(e.body.get("code") == "context_length_exceeded", "prompt + max_tokens over the context: 400 context_length_exceeded")
    check(server.proc.poll() is None, "the server is still up after the bad requests")

    # LoRA adapters.
    status, body = raw(server.url, "/v1/load_lora_adapter", {"lora_name": "tuned", "lora_path": adapter_dir})
    check(status == 200, "load_lora_adapter: 200 ({})".format(body))
    check(re.search(r"loaded adapter 'tuned' from", server.text()) is not None, "the server log shows the adapter load")
    check([m.id for m in client.models.list().data] == [name, "tuned"], "/v1/models lists the adapter")
    status, body = raw(server.url, "/v1/load_lora_adapter", {"lora_name": "tuned", "lora_path": adapter_dir})
    check(status == 400 and is_error_object(body), "loading under a taken name: 400")
    status, body = raw(server.url, "/v1/load_lora_adapter", {"lora_name": "broken", "lora_path": model_dir})
    check(status == 400 and is_error_object(body) and body["error"]["param"] == "lora_path",
          "a folder without an adapter: 400 naming lora_path ({})".format(body.get("error", {}).get("message", "")[:80]))
    status, body = raw(server.url, "/v1/load_lora_adapter", {"lora_name": "x"})
    check(status == 400 and body["error"]["param"] == "lora_path", "load without lora_path: 400")
    tuned = client.chat.completions.create(**dict(greedy, model="tuned"), logprobs=True,
                                           extra_body={"return_tokens_as_token_ids": True})
    tuned_ids = token_ids(tuned.choices[0].logprobs.content)
    check(tuned_ids != gen, "the adapter's greedy answer differs from the base model's")
    want, argmax = ref.token_logprobs(ref.tuned, ref.chat_ids(user), tuned_ids)
    diff = max(abs(c.logprob - w) for c, w in zip(tuned.choices[0].logprobs.content, want))
    check(all(argmax) and diff < 1e-3,
          "the adapter's greedy tokens are peft's argmax and their logprobs peft's (max diff {:.2e})".format(diff))
    base_again = client.chat.completions.create(**greedy)
    check(base_again.choices[0].message.content == text, "the base model still answers as before")
    status, body = raw(server.url, "/v1/unload_lora_adapter", {"lora_name": "tuned"})
    check(status == 200, "unload_lora_adapter: 200")
    try:
        client.chat.completions.create(**dict(greedy, model="tuned"))
        check(False, "an unloaded adapter is refused")
    except openai.NotFoundError:
        check(True, "an unloaded adapter: 404")
    status, body = raw(server.url, "/v1/unload_lora_adapter", {"lora_name": "tuned"})
    check(status == 404 and is_error_object(body), "unloading an unknown adapter: 404")

    # kbrl's own client: kbrl-eval model --endpoint samples a run from kbrl-serve.
    kb = os.path.join(args.work, "kb", "KernelBench", "level1")
    os.makedirs(kb)
    shutil.copy(os.path.join(args.source, "examples", "problems", "1_ScaledResidualAdd.py"), kb)
    run = os.path.join(args.work, "served-run")
    cmd = [args.eval, "model", "--endpoint", server.url + "/v1", "--model-name", name, "--api-key-env",
           "KBRL_SERVE_TEST_KEY", "--run", run, "--problems", os.path.join(args.work, "kb"), "--level", "1", "--samples", "2",
           "--max-tokens", "24", "--no-static-check", "--work-dir", os.path.join(args.work, "eval-work"),
           "--cpu-run-lanes", "1"]
    env = dict(os.environ, KBRL_SERVE_TEST_KEY=KEY)
    chats = lambda: len(re.findall(r"POST /v1/chat/completions 200", server.text()))
    before = chats()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    if r.returncode != 0:
        print(r.stdout, r.stderr)
    check(r.returncode == 0, "kbrl-eval model --endpoint <kbrl-serve> exits 0")
    gens = []
    if os.path.isfile(os.path.join(run, "generations.jsonl")):
        with open(os.path.join(run, "generations.jsonl")) as f:
            gens = [json.loads(line) for line in f if line.strip()]
    check(len(gens) == 2 and sorted(g["sample"] for g in gens) == [0, 1] and
          all(g["stop_reason"] in ("stop", "length") for g in gens) and
          all(os.path.isfile(os.path.join(run, g["file"])) for g in gens),
          "generations.jsonl holds both samples with their stop reasons and files")
    asked = chats() - before
    check(asked == 1, "one chat request for the problem's two samples (got {})".format(asked))
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    check(again.returncode == 0 and chats() - before == asked, "run again: nothing new is requested")


if __name__ == "__main__":
    main()
