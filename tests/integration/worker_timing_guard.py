#!/usr/bin/env python3
"""The worker's CUDA timing (Runner.time_model) against a simulated GPU, so that the device-wide
guard's rules are checked where there is no GPU: the run is timed by events on the current
stream; work that ends on another stream after the end event is charged to the run, beyond what
an empty synchronize costs plus GUARD_SLACK_MS; a run is never timed below its stream time; the
count and the average charge reach the result's metadata. tests/gpu (side streams) checks the
same on a real GPU. Also which timed calls have their outputs checked (checked_calls).

The simulation keeps one clock in ms: the current stream's and the other streams' queues, and
the host, which a synchronize wakes up some latency after the device is done (scripted per call).

usage: worker_timing_guard.py   (exit status 0 when every check held)
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "libkbrl", "worker"))

import torch  # noqa: E402

import kbrl_worker  # noqa: E402


class Device:
    def __init__(self, wake):
        self.host = 0.0  # when the host issues its next call
        self.stream = 0.0  # when the current stream's queued work ends
        self.other = 0.0  # when the work queued on other streams ends
        self.wake = wake  # () -> ms between the device being done and the host going on
        self.syncs = 0

    def launch(self, stream_ms, other_ms):
        self.stream = max(self.stream, self.host) + stream_ms
        if other_ms:
            self.other = max(self.other, self.host) + other_ms

    def synchronize(self):
        self.syncs += 1
        self.host = max(self.host, self.stream, self.other) + self.wake(self.syncs)


class Event:
    def __init__(self, device):
        self.device = device
        self.torch = torch
        self.is_tensor = torch.is_tensor
        self.copy = torch.Tensor.copy_
        self.t = None

    def record(self):
        d = self.device
        d.stream = max(d.stream, d.host)
        self.t = d.stream

    def synchronize(self):
        self.device.host = max(self.device.host, self.t)

    def elapsed_time(self, end):
        return end.t - self.t


class Harness:
    """What time_model takes from the worker's harness, on the simulated device."""

    def __init__(self, device):
        self.device = device
        self.torch = torch
        self.is_tensor = torch.is_tensor
        self.copy = torch.Tensor.copy_

    def cuda_event(self, enable_timing=True):
        assert enable_timing
        return Event(self.device)

    def cuda_synchronize(self):
        self.device.synchronize()

    def clone(self, v):
        return v.clone()


class Model:
    """A candidate that puts `stream_ms` of work on the current stream and `other_ms` on a stream
    of its own, without waiting for it."""

    def __init__(self, device, stream_ms, other_ms):
        self.device, self.stream_ms, self.other_ms = device, stream_ms, other_ms

    def __call__(self, x):
        self.device.launch(self.stream_ms, self.other_ms)
        return x


failures = []


def check(what, ok):
    print("{}: {}".format("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)


def time_it(stream_ms, other_ms, wake, trials=100):
    device = Device(wake)
    runner = kbrl_worker.Runner(torch, Harness(device), "cpu", "fp32", False)
    runner.is_cuda = True  # the CUDA path, on the simulated device
    runner.flush_bytes = lambda: 4096
    runs = []
    out = runner.time_model(Model(device, stream_ms, other_ms), lambda k: [torch.zeros(4)], 3, trials, runs=runs)
    result = {"runtime": out}
    kbrl_worker.note_outside_stream(result, "runtime", "outside_stream_runs")
    return out, runs, result.get("metadata", {}).get("outside_stream_runs")


def near(a, b, tol=1e-9):
    return abs(a - b) <= tol


def main():
    slack = kbrl_worker.GUARD_SLACK_MS
    steady = lambda n: 0.02  # noqa: E731  (20 us, every synchronize)

    out, runs, note = time_it(1.0, 0.0, steady)
    check("honest kernel: every run timed at its stream time", all(near(r[0], 1.0) for r in runs)
          and near(out["mean"], 1.0) and near(out["max"], 1.0))
    check("honest kernel: no run charged, nothing in the metadata", note is None and "outside_stream_runs" not in out
          and "outside_stream_ms" not in out)

    out, runs, note = time_it(0.0, 0.5, steady)
    check("side stream only: each run charged the hidden work less the slack",
          near(out["mean"], 0.5 - slack) and near(out["min"], 0.5 - slack))
    check("side stream only: the metadata counts every run with its charge",
          note == "100 of 100, {:.4f} ms each".format(0.5 - slack))

    out, runs, note = time_it(0.2, 0.5, steady)
    check("side stream beside stream work: timed to the later end", near(out["mean"], 0.5 - slack))

    out, runs, note = time_it(0.5, 0.2, steady)
    check("side work ending before the stream's end event is inside the stream time", near(out["mean"], 0.5)
          and note is None)

    out, runs, note = time_it(0.0, slack * 0.5, steady)
    check("side work within the slack is not charged", near(out["mean"], 0.0) and note is None)

    # A host whose synchronizing thread wakes up late now and then. Each of the 3 warm-ups
    # synchronizes once after its inputs are made (1-3) and the warm-ups end with one more (4);
    # then each trial k synchronizes four times: after its inputs are made (4k + 5), before the
    # run (4k + 6), device-wide after it (4k + 7) and in the empty measurement (4k + 8).
    late = 0.3

    def late_in_empty(n):
        return late if n >= 8 and n % 4 == 0 else 0.02

    out, runs, note = time_it(1.0, 0.0, late_in_empty)
    check("a late wake-up in the empty measurement never times a run below its stream time",
          all(r[2] > 0.2 for r in runs) and near(out["min"], 1.0) and near(out["mean"], 1.0) and note is None)

    def late_after_run(n):
        return late if n >= 7 and n % 4 == 3 and (n - 7) // 4 % 10 == 0 else 0.02  # trials 0, 10, ..., 90

    out, runs, note = time_it(1.0, 0.0, late_after_run)
    charged = sum(1 for r in runs if r[1] - r[0] - r[2] - slack > 0)
    check("a late wake-up after the run is charged as work elsewhere (the busy-host limitation)",
          charged == 10 and near(out["mean"], 1.0 + charged * (late - 0.02 - slack) / 100)
          and note == "10 of 100, {:.4f} ms each".format(late - 0.02 - slack))

    # Which timed calls have their outputs checked (kbrl_worker.checked_calls): all of them up to
    # TIMED_CHECKS; beyond, the last one and one from each equal slice of the others, so late
    # calls are always among them, drawn from the evaluation's seed.
    n = kbrl_worker.TIMED_CHECKS
    check("up to TIMED_CHECKS timed calls, every one is checked",
          all(kbrl_worker.checked_calls(t, 5) == list(range(t)) for t in range(n + 1)))
    spread = True
    for trials in (n + 1, 20, 100, 1000):
        for seed in range(50):
            calls = kbrl_worker.checked_calls(trials, seed)
            slices = [(trials - 1) * j // (n - 1) for j in range(n)]
            spread = spread and len(calls) == n and calls[-1] == trials - 1 and all(
                slices[j] <= c < slices[j + 1] for j, c in enumerate(calls[:-1]))
    check("beyond, the last call and one from each slice of the others", spread)
    check("the same seed draws the same calls, another seed others",
          kbrl_worker.checked_calls(100, 7) == kbrl_worker.checked_calls(100, 7)
          and len({tuple(kbrl_worker.checked_calls(100, s)) for s in range(20)}) > 1)

    if failures:
        print("{} check(s) failed".format(len(failures)))
        return 1
    print("all checks held")
    return 0


if __name__ == "__main__":
    sys.exit(main())
