#!/usr/bin/env python3
"""Scores a model's answer through a kbrl-evald server with nothing but Python's standard library:
for frameworks that call a reward URL, or a language other than Python (the same two requests
work from any HTTP client). Wire protocol: docs/services.md.

    python3 http_reward.py --url http://127.0.0.1:8470 --problem examples/problems/5_RMSNorm.py \
        --completion answer.txt [--language cuda] [--token-file token]

Prints one JSON line: the request id, the reward, and the verdict it came from. The reward is
kbrl's `kbrl_stage2` preset written out (0.1 format + 0.2 compiled + 0.7 correct, partial credit for
trials passed, 0 for a static-check or reward-hack rejection); with the kbrl module at hand,
kbrl.compute_reward(result, completion, "kbrl_stage2") gives the same number.
"""
import argparse
import json
import os
import re
import urllib.request
import uuid


def kernel_of(completion: str) -> str:
    """The program in an answer: the last fenced block of the last <KERNEL> block, else of the text."""
    blocks = re.findall(r"<KERNEL>(.*?)(?:</KERNEL>|$)", completion, flags=re.S | re.I)
    scope = blocks[-1] if blocks else completion
    fences = re.findall(r"```[^\n]*\n(.*?)```", scope, flags=re.S)
    return fences[-1] if fences else scope


def kbrl_stage2_reward(result: dict) -> float:
    if not result["static_ok"] or result["error_category"] in ("static_check", "reward_hack"):
        return 0.0
    trials = result["trials_passed"] / result["trials_total"] if result["trials_total"] else 0.0
    correct = 1.0 if result["correctness"] else min(max(trials, 0.0), 1.0)
    return 0.1 * result["format_ok"] + 0.2 * result["compiled"] + 0.7 * correct


def evaluate(url: str, requests: list, token: str = "", timeout: float = 3600) -> list:
    """POST /v1/evaluations, streamed: one EvalResult per line as each finishes."""
    body = json.dumps({"requests": requests, "stream": True}).encode()
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url.rstrip("/") + "/v1/evaluations", data=body, headers=headers, method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as response:  # raises HTTPError for 4xx/5xx
        return [json.loads(line) for line in response if line.strip()]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True, help="kbrl-evald's address, http(s)://host:port")
    p.add_argument("--problem", required=True, help="the reference program (KernelBench format)")
    p.add_argument("--completion", required=True, help="the model's answer (or a bare program)")
    p.add_argument("--language", default="cuda", help="cuda, triton, hip or cpp [cuda]")
    p.add_argument("--token-file", help="bearer token (default: $KBRL_EVALD_TOKEN)")
    p.add_argument("--options", help="evaluation options as JSON, e.g. '{\"timing_trials\": 20}' (default: the server's)")
    args = p.parse_args()
    token = open(args.token_file).read().strip() if args.token_file else os.environ.get("KBRL_EVALD_TOKEN", "")
    completion = open(args.completion).read()
    request = {
        "request_id": str(uuid.uuid4()),  # the server's idempotency key: a retry with it is never evaluated twice
        "problem": {"id": os.path.splitext(os.path.basename(args.problem))[0], "source": open(args.problem).read()},
        "candidate_source": kernel_of(completion),
        "language": args.language,
    }
    if args.options:
        request["options"] = json.loads(args.options)
    for result in evaluate(args.url, [request], token):
        print(json.dumps({"request_id": result["request_id"], "reward": kbrl_stage2_reward(result),
                          "correct": result["correctness"], "error_category": result["error_category"],
                          "speedup": result["speedup"]}))


if __name__ == "__main__":
    main()
