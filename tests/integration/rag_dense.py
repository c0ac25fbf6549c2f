#!/usr/bin/env python3
"""Dense retrieval end to end on the demo policy (a tiny random Qwen2 checkpoint,
scripts/make_demo_model.py) on the CPU:

- the in-process embeddings (model::DecoderEmbedder, through embed_texts), kbrl-serve's
  /v1/embeddings (urllib with encoding_format float and base64, and the official `openai`
  package) and transformers' (the last hidden state after the final norm, averaged over the
  non-padding tokens of a right-padded batch, L2-normalized) agree; token-id inputs equal text
  inputs; usage counts the tokens; bad requests get OpenAI error objects;
- with FAISS: `kbrl-index build --dense` through kbrl-serve and in process over the bundled corpus
  (tests/data/retrieval), the labeled queries answered alike by both indexes, an index built through
  the server searched in process, a copy of a corpus problem left out as a leak, and the refusals
  (another embedder, no embedder for a dense index, --dense without embeddings, embeddings flags on
  a BM25 index). Prints the mean recall@5 of the demo model on the labeled queries: a random tiny
  model retrieves poorly, and no bar is set on it (docs/retrieval.md).

    rag_dense.py --serve <kbrl-serve> --index <kbrl-index> --embed <embed_texts> --faiss ON|OFF
                 --source <repo> --work <scratch>
"""
import argparse
import base64
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request

FAILURES = []
KEY = "sk-rag-dense-test"
ABS = 1e-5  # fp32 against transformers: pooled means of a 2-layer model agree to rounding


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


def max_diff(a, b):
    return max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb))


def reference(model_dir, texts):
    """transformers: token ids, and the pooled embeddings of a right-padded batch."""
    import torch
    from transformers import AutoModel, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "right"
    model = AutoModel.from_pretrained(model_dir, dtype=torch.float32).eval()
    batch = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        h = model(**batch).last_hidden_state  # [B, T, H], after the final norm
        m = batch["attention_mask"].unsqueeze(-1).to(h.dtype)
        pooled = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1)
        # Each text alone as well: the oracle's own padding must change nothing.
        alone = [torch.nn.functional.normalize(model(**tok(t, return_tensors="pt")).last_hidden_state[0].mean(0), dim=0)
                 for t in texts]
    ids = [tok(t)["input_ids"] for t in texts]
    return ids, pooled.tolist(), [a.tolist() for a in alone]


def post(url, path, body, key=KEY):
    data = json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method="POST",
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


def is_error(status, body, want_status, param=None):
    ok = status == want_status and isinstance(body, dict) and isinstance(body.get("error"), dict)
    return ok and (param is None or body["error"].get("param") == param)


class Server:
    def __init__(self, serve, model, work):
        self.log_path = os.path.join(work, "serve.log")
        port_file = os.path.join(work, "serve.port")
        if os.path.exists(port_file):
            os.remove(port_file)
        self.log = open(self.log_path, "w")
        env = dict(os.environ, KBRL_RAG_DENSE_KEY=KEY)
        self.proc = subprocess.Popen([serve, "--model", model, "--device", "cpu", "--listen", "127.0.0.1:0",
                                      "--port-file", port_file, "--api-key-env", "KBRL_RAG_DENSE_KEY"],
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


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    return p.returncode, p.stdout + p.stderr


HIT = re.compile(r"^\s*\d+\.\s+(-?[\d.]+)\s+(\S+)\s+\[")


def hits_of(output):
    return [(m.group(2), float(m.group(1))) for m in (HIT.match(l) for l in output.splitlines()) if m]


def check_embeddings(args, server, model_dir, texts):
    ids, padded, alone = reference(model_dir, texts)
    check(max_diff(padded, alone) < ABS, "transformers: a right-padded batch pools as each text alone ({:.1e})"
          .format(max_diff(padded, alone)))

    texts_file = os.path.join(args.work, "texts.json")
    with open(texts_file, "w") as f:
        json.dump(texts, f)
    code, out = run([args.embed, model_dir, texts_file])
    check(code == 0, "embed_texts runs")
    local = json.loads(out)
    check(local["model"] == "demo" and local["dimension"] == 64, "in process: 'demo', 64 dimensions")
    d = max_diff(local["embeddings"], padded)
    check(d < ABS, "in process == transformers (max abs diff {:.1e})".format(d))
    norms = [sum(x * x for x in row) ** 0.5 for row in local["embeddings"]]
    check(all(abs(n - 1) < 1e-5 for n in norms), "in process: unit vectors")

    status, body = post(server.url, "/v1/embeddings", {"model": "demo", "input": texts})
    check(status == 200 and body.get("object") == "list" and len(body.get("data", [])) == len(texts),
          "/v1/embeddings answers a list with one item per input")
    served = [None] * len(texts)
    for item in body["data"]:
        served[item["index"]] = item["embedding"]
    check(all(item["object"] == "embedding" for item in body["data"]), "items are 'embedding' objects")
    d = max_diff(served, padded)
    check(d < ABS, "kbrl-serve == transformers (max abs diff {:.1e})".format(d))
    d = max_diff(served, local["embeddings"])
    check(d < 1e-6, "kbrl-serve == in process (max abs diff {:.1e})".format(d))
    tokens = sum(len(i) for i in ids)
    check(body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens},
          "usage counts the inputs' tokens as transformers' tokenizer does ({})".format(tokens))
    check(body["model"] == "demo", "the answer names the model")

    status, b64 = post(server.url, "/v1/embeddings", {"model": "demo", "input": texts, "encoding_format": "base64"})
    decoded = [list(struct.unpack("<{}f".format(64), base64.b64decode(item["embedding"]))) for item in b64["data"]]
    check(status == 200 and max_diff(decoded, served) == 0, "encoding_format base64: the same floats, little-endian")

    status, one = post(server.url, "/v1/embeddings", {"input": ids[0]})
    check(status == 200 and max_diff([one["data"][0]["embedding"]], [served[0]]) < 1e-6,
          "token ids as input (and the model by default) embed as the text does")
    status, many = post(server.url, "/v1/embeddings", {"model": "demo", "input": [ids[1], texts[2]], "dimensions": 64})
    check(status == 200 and max_diff([r["embedding"] for r in many["data"]], served[1:3]) < 1e-6,
          "a list of token-id lists and strings; 'dimensions' equal to the model's is accepted")

    import openai
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=120)
    r = client.embeddings.create(model="demo", input=texts)  # the package asks for base64 by default
    check(max_diff([e.embedding for e in r.data], served) < 1e-6 and r.usage.prompt_tokens == tokens,
          "the openai package reads kbrl-serve's embeddings")

    # Refusals.
    status, body = post(server.url, "/v1/embeddings", {"model": "nope", "input": "x"})
    check(is_error(status, body, 404, "model"), "an unknown model: 404")
    status, body = post(server.url, "/v1/embeddings", {"model": "demo", "input": "x", "dimensions": 16})
    check(is_error(status, body, 400, "dimensions"), "dimensions other than the model's: 400")
    status, body = post(server.url, "/v1/embeddings", {"model": "demo", "input": ""})
    check(is_error(status, body, 400, "input"), "an empty input: 400")
    status, body = post(server.url, "/v1/embeddings", {"model": "demo"})
    check(is_error(status, body, 400, "input"), "no input: 400")
    status, body = post(server.url, "/v1/embeddings", {"model": "demo", "input": "x", "encoding_format": "int8"})
    check(is_error(status, body, 400, "encoding_format"), "an unknown encoding_format: 400")
    status, body = post(server.url, "/v1/embeddings", {"model": "demo", "input": [5] * 5000})
    check(is_error(status, body, 400, "input") and "maximum context length" in body["error"]["message"],
          "an input longer than the context: 400")
    status, body = post(server.url, "/v1/embeddings", {"model": "demo", "input": "x"}, key="wrong")
    check(is_error(status, body, 401), "a wrong API key: 401")
    check("POST /v1/embeddings 200 model=demo inputs={}".format(len(texts)) in server.text(),
          "the server log has a line per embeddings request")


def check_indexes(args, server, model_dir):
    corpus = os.path.join(args.source, "tests", "data", "retrieval", "corpus.jsonl")
    fields = ["--corpus", corpus, "--field-id", "id", "--field-language", "language", "--field-speedup", "speedup"]
    env = dict(os.environ, KBRL_RAG_DENSE_KEY=KEY)
    endpoint = ["--embeddings-endpoint", server.url + "/v1", "--embeddings-model", "demo",
                "--embeddings-api-key-env", "KBRL_RAG_DENSE_KEY"]
    checkpoint = ["--embeddings-checkpoint", model_dir, "--embeddings-device", "cpu"]
    served_index = os.path.join(args.work, "served.kbrldix")
    local_index = os.path.join(args.work, "local.kbrldix")
    code, out = run([args.index, "build", *fields, "--dense", *endpoint, "--embeddings-batch", "8",
                     "--out", served_index], env)
    print(out)
    check(code == 0 and "embedded and indexed 36 entries (64 dimensions" in out,
          "kbrl-index build --dense through kbrl-serve")
    check("embedding with 'demo' (64 dimensions)" in out and re.search(r"wrote .*served\.kbrldix \(\d", out),
          "build names the embedder and reports the file's size")
    code, out = run([args.index, "build", *fields, "--dense", *checkpoint, "--out", local_index])
    print(out)
    check(code == 0 and "embedded and indexed 36 entries (64 dimensions" in out, "kbrl-index build --dense in process")

    queries = [json.loads(l) for l in open(os.path.join(args.source, "tests", "data", "retrieval", "queries.jsonl"))]
    total = 0.0
    same = True
    for q in queries:
        problem = os.path.join(args.work, q["id"] + ".py")
        with open(problem, "w") as f:
            f.write(q["source"])
        code_a, a = run([args.index, "query", "--index", local_index, "--problem", problem, *checkpoint])
        code_b, b = run([args.index, "query", "--index", served_index, "--problem", problem, *endpoint], env)
        code_c, c = run([args.index, "query", "--index", served_index, "--problem", problem, *checkpoint])
        ha, hb, hc = hits_of(a), hits_of(b), hits_of(c)
        if not (code_a == code_b == code_c == 0 and len(ha) == 5 and [h[0] for h in ha] == [h[0] for h in hb] ==
                [h[0] for h in hc] and max(abs(x[1] - y[1]) for x, y in zip(ha, hb)) <= 0.0015):
            same = False
            print(a, b, c)
        found = len(set(h[0] for h in ha) & set(q["relevant"]))
        total += found / len(q["relevant"])
        print("{:<24} recall@5 {:.2f}: {}".format(q["id"], found / len(q["relevant"]),
                                                   " ".join("{}({:.3f})".format(i, s) for i, s in ha)))
    check(same, "every labeled query: the same 5 hits from the in-process index, the served one, and the served "
                "one searched in process")
    print("dense retrieval with the demo model: mean recall@5 {:.3f} over {} labeled queries (no bar: a random "
          "2-layer model)".format(total / len(queries), len(queries)))
    check(0 <= total <= len(queries), "recall@5 computed")

    # Leakage: a corpus problem itself is excluded as an exact copy.
    leaks = [json.loads(l) for l in open(os.path.join(args.source, "tests", "data", "retrieval", "leakage.jsonl"))]
    copy = next(l for l in leaks if l["id"] == "copy_relu")
    problem = os.path.join(args.work, "copy_relu.py")
    with open(problem, "w") as f:
        f.write(copy["source"])
    code, out = run([args.index, "query", "--index", local_index, "--problem", problem, *checkpoint, "-k", "36"])
    check(code == 0 and "excluded as leaks of the problem: 1 (1 exact, 0 near)" in out and
          "relu" not in [h[0] for h in hits_of(out)] and len(hits_of(out)) == 35,
          "a copy of the relu problem: relu excluded as an exact leak, the other 35 entries ranked")
    code, out = run([args.index, "query", "--index", local_index, "--problem", problem, *checkpoint,
                     "--language", "triton", "-k", "36"])
    check(code == 0 and len(hits_of(out)) > 0 and "[triton" in out and "[cuda" not in out,
          "--language triton: Triton entries only")

    # Refusals.
    code, out = run([args.index, "query", "--index", local_index, "--problem", problem, *checkpoint,
                     "--embeddings-model", "renamed"])
    check(code == 1 and "built with embeddings of 'demo' (64 dimensions)" in out and "'renamed'" in out,
          "querying with another embedder: exit 1, naming both")
    code, out = run([args.index, "query", "--index", local_index, "--problem", problem])
    check(code == 2 and "'demo' (64 dimensions)" in out and "--embeddings-model demo" in out,
          "a dense index without embeddings flags: exit 2, naming the model it needs")
    code, out = run([args.index, "build", *fields, "--dense", "--out", os.path.join(args.work, "x.kbrldix")])
    check(code == 2 and "--dense needs" in out, "--dense without embeddings: exit 2")
    bm25 = os.path.join(args.work, "bm25.kbrlidx")
    code, out = run([args.index, "build", *fields, "--out", bm25])
    check(code == 0, "a BM25 index of the same corpus")
    code, out = run([args.index, "query", "--index", bm25, "--problem", problem, *checkpoint])
    check(code == 2 and "BM25 index" in out, "embeddings flags on a BM25 index: exit 2")
    code, out = run([args.index, "query", "--index", bm25, "--problem", problem])
    check(code == 0 and "BM25" in out and len(hits_of(out)) == 5, "query still reads BM25 indexes")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve", required=True)
    ap.add_argument("--index", required=True)
    ap.add_argument("--embed", required=True)
    ap.add_argument("--faiss", default="ON")
    ap.add_argument("--source", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    model_dir = os.path.join(args.work, "demo")
    subprocess.run([sys.executable, os.path.join(args.source, "scripts", "make_demo_model.py"), model_dir],
                   check=True, capture_output=True)
    with open(os.path.join(args.source, "examples", "problems", "3_RowSumOfSquares.py")) as f:
        problem = f.read()
    texts = ["def relu(x):\n    return torch.relu(x)\n", problem, "x", "Σ softmax über die Zeilen — ok ✓",
             "<|im_end|> in the text", "import torch\n" * 20]

    server = Server(args.serve, model_dir, args.work)
    try:
        check_embeddings(args, server, model_dir, texts)
        if args.faiss.upper() in ("ON", "TRUE", "1"):
            check_indexes(args, server, model_dir)
        else:
            print("kbrl was built without FAISS: the index checks are skipped")
    finally:
        code = server.stop()
        check(code == 0, "SIGTERM: kbrl-serve exits 0 (got {})".format(code))
        if FAILURES:
            print("---- kbrl-serve log (last 40 lines) ----\n" + "\n".join(server.text().splitlines()[-40:]))
    if FAILURES:
        print("{} check(s) failed".format(len(FAILURES)))
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
