#!/usr/bin/env python3
"""deploy/ stays in step with the programs it starts: every `--flag` that deploy/'s Kubernetes
manifest, Slurm scripts and Dockerfile pass to kbrl-evald appears in `kbrl-evald --help`, and
every KEY=VALUE override they pass to kbrl-train is a key that `kbrl-train keys` lists, and the
manifests parse as YAML. A renamed
flag or key fails here instead of on a cluster.

    deploy_flags.py --evald <kbrl-evald> [--train <kbrl-train>] --source <repo>
"""
import argparse
import json
import os
import re
import subprocess
import sys

import yaml


def flags_in_help(program, *args):
    r = subprocess.run([program, *args, "--help"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        sys.exit(f"{program} --help: exit {r.returncode}: {r.stderr}")
    return set(re.findall(r"(--[a-z0-9][a-z0-9-]*)", r.stdout))


def evald_invocations(source):
    """(file, flag) for each flag given to kbrl-evald in deploy/: the Dockerfile's CMD, the
    manifest's args and the Slurm script's command line (continued lines joined)."""
    found = []
    deploy = os.path.join(source, "deploy")
    for root, _, files in os.walk(deploy):
        for name in files:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, source)
            text = open(path).read()
            if name == "Dockerfile":
                m = re.search(r"^CMD\s+(\[.*\])", text, re.M)
                if m:
                    found += [(rel, a.split("=")[0]) for a in json.loads(m.group(1)) if a.startswith("--")]
            elif name.endswith((".yaml", ".yml")):
                docs = [d for d in yaml.safe_load_all(text) if d]  # a malformed manifest fails here
                kinds = sorted(d.get("kind", "?") for d in docs)
                print(f"ok   {rel}: parses ({', '.join(kinds)})")
                # The container args of a kbrl-evald container: `- --flag=value` lines under args:.
                for block in re.findall(r"args:\n((?:\s+- .*\n)+)", text):
                    found += [(rel, f) for f in re.findall(r"- (--[a-z0-9-]+)", block)]
            else:
                joined = re.sub(r"\\\n\s*", " ", text)
                for line in joined.splitlines():
                    if re.match(r"\s*kbrl-evald\s", line):
                        found += [(rel, f) for f in re.findall(r"\s(--[a-z0-9-]+)", line)]
    return found


def train_overrides(source):
    found = []
    path = os.path.join(source, "deploy/slurm/kbrl-train.sbatch")
    for line in open(path):
        if re.match(r"\s*srun .*kbrl-train", line):
            found += [(os.path.relpath(path, source), k) for k in re.findall(r"\s([a-z_]+(?:\.[a-z_]+)+)=", line)]
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--evald", required=True)
    ap.add_argument("--train")
    ap.add_argument("--source", required=True)
    a = ap.parse_args()
    failures = []
    known = flags_in_help(a.evald)
    uses = evald_invocations(a.source)
    if len(uses) < 10:
        failures.append(f"found only {len(uses)} kbrl-evald flags in deploy/: the parser missed the files")
    for rel, flag in uses:
        ok = flag in known
        print(("ok   " if ok else "FAIL ") + f"{rel}: kbrl-evald {flag}")
        if not ok:
            failures.append(f"{rel}: kbrl-evald has no flag {flag}")
    if a.train:
        r = subprocess.run([a.train, "keys"], capture_output=True, text=True, timeout=60)
        keys = set(re.findall(r"`([a-z_]+(?:\.[a-z_]+)+)`", r.stdout))
        overrides = train_overrides(a.source)
        if not overrides:
            failures.append("found no kbrl-train overrides in deploy/slurm/kbrl-train.sbatch")
        for rel, key in overrides:
            ok = key in keys
            print(("ok   " if ok else "FAIL ") + f"{rel}: kbrl-train key {key}")
            if not ok:
                failures.append(f"{rel}: kbrl-train has no key {key}")
    for f in failures:
        print("FAIL " + f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
