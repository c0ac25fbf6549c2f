#!/usr/bin/env python3
"""kbrl's timing of a run against KernelBench's, side by side in one process on one GPU.

    python3 benchmarks/timing_agreement/measure.py --kernelbench <checkout> --out <dir>

For each model (KernelBench level-1 reference models, one of ours, and two that leave their work
on a side stream) the same inputs are timed, in interleaved rounds, by
  kernelbench   KernelBench's timing.time_execution_with_cuda_event (its default: 3 warm-ups,
                100 timed runs after one discarded, L2 flush, events on the current stream)
  kbrl          the worker's Runner.time_model (5 warm-ups, 100 runs), with each run's times on
                the current stream, device-wide, and of an empty synchronize
  kbrl-before   the worker's method up to 21f0bae: the device synchronized before the start
                event and again before the end event
first on an idle machine, then with every core busy with a spinning process at nice 10 (the
evaluator's compilers run at nice 10). Writes results.json and results.md into --out.
"""
import argparse
import contextlib
import ctypes
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "libkbrl" / "worker"))
sys.path.insert(0, str(REPO / "benchmarks" / "eval_throughput"))

import torch  # noqa: E402

import kb_import  # noqa: E402
import kbrl_worker  # noqa: E402

LEVEL1 = ["1_Square_matrix_multiplication_", "19_ReLU", "40_LayerNorm", "51_Argmax_over_a_dimension",
          "88_MinGPTNewGelu", "100_HingeLoss"]


def load_module(path):
    import importlib.util
    spec = importlib.util.spec_from_file_location("m_" + Path(path).stem.split("_")[0], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class SideStreamAdd(torch.nn.Module):
    """x + alpha * r computed on a stream of its own, returned without the caller's stream
    waiting for it: work a timer must not miss."""

    def __init__(self, alpha=0.5):
        super().__init__()
        self.alpha = alpha
        self.side = None

    def forward(self, x, r):
        if self.side is None:
            self.side = torch.cuda.Stream(device=x.device)
        self.side.wait_stream(torch.cuda.current_stream(x.device))
        with torch.cuda.stream(self.side):
            out = torch.add(x, r, alpha=self.alpha)
        return out


class ScaledAdd(torch.nn.Module):
    def __init__(self, alpha=0.5):
        super().__init__()
        self.alpha = alpha

    def forward(self, x, r):
        return torch.add(x, r, alpha=self.alpha)


def models(checkout):
    """(name, model, inputs) on the GPU."""
    dev = torch.device("cuda")
    out = []
    for name in LEVEL1:
        mod = load_module(Path(checkout) / "KernelBench" / "level1" / (name + ".py"))
        torch.manual_seed(42)
        with dev:
            init = mod.get_init_inputs()
            model = mod.Model(*init).to(dev)
            inputs = [x.to(dev) if torch.is_tensor(x) else x for x in mod.get_inputs()]
        out.append(("level1/" + name, model, inputs))
    mod = load_module(REPO / "examples" / "problems" / "1_ScaledResidualAdd.py")
    with dev:
        out.append(("examples/1_ScaledResidualAdd", mod.Model(*mod.get_init_inputs()).to(dev),
                    [x.to(dev) for x in mod.get_inputs()]))
    for rows in (64, 8192):
        inputs = [torch.randn(rows, 4096, device=dev), torch.randn(rows, 4096, device=dev)]
        out.append(("scaled add {}x4096".format(rows), ScaledAdd(), inputs))
        out.append(("side stream {}x4096".format(rows), SideStreamAdd(), inputs))
    return out


def before(model, inputs, warmup=5, trials=100):
    """The worker's timing up to 21f0bae (kept here to compare against)."""
    times = []
    with torch.no_grad():
        for _ in range(warmup):
            model(*inputs)
        torch.cuda.synchronize()
        flush = torch.empty(int(torch.cuda.get_device_properties(0).L2_cache_size * 2) // 4, dtype=torch.int32,
                            device="cuda")
        for _ in range(trials):
            args = [x.clone() if torch.is_tensor(x) else x for x in inputs]
            flush.zero_()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            model(*args)
            torch.cuda.synchronize()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    return times


def measure(kb, runner, model, inputs, rounds):
    rec = {"kernelbench": [], "kbrl": [], "kbrl-before": [], "on_stream": [], "device_minus_stream": [], "empty": [],
           "charged": 0, "runs": 0}
    for _ in range(rounds):
        with torch.no_grad():
            t = kb.timing.time_execution_with_cuda_event(model, inputs, num_trials=100, verbose=False,
                                                         device=torch.device("cuda:0"))
        rec["kernelbench"].append(statistics.mean(t))
        runs = []
        s = runner.time_model(model, [inputs], 5, 100, runs=runs)
        rec["kbrl"].append(s["mean"])
        rec["charged"] += s.get("outside_stream_runs", 0)
        rec["runs"] += len(runs)
        rec["on_stream"] += [o for o, _, _ in runs]
        rec["device_minus_stream"] += [d - o for o, d, _ in runs]
        rec["empty"] += [e for _, _, e in runs]
        rec["kbrl-before"].append(statistics.mean(before(model, inputs)))
    return rec


def quantiles(xs):
    xs = sorted(xs)
    pick = lambda q: xs[min(len(xs) - 1, int(q * len(xs)))]  # noqa: E731
    return {"min": xs[0], "p50": pick(0.5), "p90": pick(0.9), "p99": pick(0.99), "max": xs[-1]}


def busy_cores(n):
    code = "import os\nos.nice(10)\nwhile True:\n    pass\n"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernelbench", required=True, help="a KernelBench checkout")
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--load", type=int, default=os.cpu_count(), help="busy processes in the loaded condition")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    kb, notes = kb_import.load(args.kernelbench)
    h = kbrl_worker.Harness(torch)
    runner = kbrl_worker.Runner(torch, h, "cuda:0", "fp32", False)
    cases = models(args.kernelbench)
    flags = ctypes.c_uint(0)
    with kbrl_worker.spinning_synchronize():  # the flags the worker's timing runs under
        ctypes.CDLL("libcuda.so.1").cuCtxGetFlags(ctypes.byref(flags))
    results = {"machine": {"gpu": torch.cuda.get_device_name(0), "cpus": os.cpu_count(), "torch": torch.__version__,
                           "python": platform.python_version(), "kernelbench_import": notes,
                           "context_flags_while_timing": flags.value},
               "conditions": {}}
    for condition, load in (("idle", 0), ("loaded", args.load)):
        procs = busy_cores(load)
        time.sleep(0.5 if load else 0)
        try:
            rows = {}
            for name, model, inputs in cases:
                with contextlib.redirect_stdout(io.StringIO()):  # KernelBench prints a line per call
                    rows[name] = measure(kb, runner, model, inputs, args.rounds)
                print(condition, name, {k: round(statistics.mean(rows[name][k]), 4)
                                        for k in ("kernelbench", "kbrl", "kbrl-before")}, flush=True)
        finally:
            for p in procs:
                p.kill()
        results["conditions"][condition] = rows
    (out / "results.json").write_text(json.dumps(results, indent=1))
    (out / "results.md").write_text(report(results))
    print(report(results))


def report(results):
    m = results["machine"]
    lines = ["# Run timing: kbrl against KernelBench, one process, one GPU", "",
             "{} ({} CPUs), torch {}, Python {}. Means in ms over 100 runs, averaged over rounds; ratio = "
             "kbrl / KernelBench; spread = the rounds' (max - min) / mean of KernelBench's own means. "
             "device - stream: each kbrl run's device-wide end minus its current-stream end (us); "
             "empty: an empty synchronize (us).".format(m["gpu"], m["cpus"], m["torch"], m["python"]), ""]
    for condition, rows in results["conditions"].items():
        lines += ["## " + condition, "",
                  "| model | KernelBench | kbrl | ratio | before | ratio | KB spread | device - stream p50 / p99 (us) "
                  "| empty p50 / p99 (us) | charged runs |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for name, r in rows.items():
            kbm = statistics.mean(r["kernelbench"])
            km = statistics.mean(r["kbrl"])
            bm = statistics.mean(r["kbrl-before"])
            spread = (max(r["kernelbench"]) - min(r["kernelbench"])) / kbm
            g = quantiles(r["device_minus_stream"])
            e = quantiles(r["empty"])
            lines.append("| {} | {:.4f} | {:.4f} | {:.3f} | {:.4f} | {:.3f} | {:.1%} | {:.1f} / {:.1f} | {:.1f} / {:.1f} "
                         "| {} of {} |".format(name, kbm, km, km / kbm, bm, bm / kbm, spread, g["p50"] * 1e3,
                                               g["p99"] * 1e3, e["p50"] * 1e3, e["p99"] * 1e3, r["charged"], r["runs"]))
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
