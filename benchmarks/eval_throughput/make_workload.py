#!/usr/bin/env python3
"""Writes the evaluation-throughput workload: four candidates per KernelBench level-1 problem.

The candidates come from our own honest kernels in tests/gpu/kernelbench_l1 (the manifest's
entries without "expect"), in KernelBench's generation layout
(`level_1_problem_<P>_sample_<S>_kernel.py`), so that an RL batch's mix of outcomes is evaluated:

  sample 0  as_is          the kernel as it is in tests/gpu/kernelbench_l1 (byte for byte)
  sample 1  variant        a different launch configuration or tile shape, still correct
  sample 2  wrong          a real numeric bug that KernelBench's own inputs (mostly torch.rand,
                           in [0, 1)) expose beyond its atol = rtol = 1e-4: every one is checked
                           by the reasoning written next to it below
  sample 3  compile_error  a C++/CUDA error in the kernel source that nvcc rejects

Every changed candidate gets its own extension name (`<name>_s<S>`), so that no evaluator has to
tell apart two builds of one name. Each edit must match its text exactly as often as stated, so
a change in the source kernels stops the generator instead of silently producing something else.

usage: make_workload.py [--check]
  writes workload/ (the candidates and workload.json); --check only compares what it would write
  with what is there and exits 1 on any difference.
"""
import argparse
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SOURCE_DIR = REPO / "tests" / "gpu" / "kernelbench_l1"
OUT_DIR = HERE / "workload"

EXPECT = {
    "as_is": {"compiled": True, "correct": True},
    "variant": {"compiled": True, "correct": True},
    "wrong": {"compiled": True, "correct": False},
    "compile_error": {"compiled": False, "correct": False},
}

ELEMENTWISE_TO_512 = [("constexpr int kThreads = 256;", "constexpr int kThreads = 512;"),
                      ("->multiProcessorCount) * 16;", "->multiProcessorCount) * 8;")]
ELEMENTWISE_TO_128 = [("constexpr int kThreads = 256;", "constexpr int kThreads = 128;"),
                      ("->multiProcessorCount) * 16;", "->multiProcessorCount) * 32;")]

# Per source file: sample -> (what changed, [(old, new) or (old, new, count)]).
EDITS = {
    "1_Square_matrix_multiplication_.py": {
        1: ("k tiles of 16 instead of 8 (8 loads per thread per stage; same fp32 FMA order over k)",
            [("constexpr int kBK = 8;    // depth", "constexpr int kBK = 16;   // depth")]),
        # The last k tile (8 of 4096 products per element, about 2 in value) is never added.
        2: ("off-by-one in the k-tile loop bound: the last tile of 8 products is skipped",
            [("for (int k0 = 0; k0 < K; k0 += kBK) {", "for (int k0 = 0; k0 + kBK < K; k0 += kBK) {")]),
        3: ("undeclared identifier kBlockK",
            [("const int k = idx % kBK;", "const int k = idx % kBlockK;")]),
    },
    "19_ReLU.py": {
        1: ("512 threads per block, at most 8 blocks per SM", ELEMENTWISE_TO_512),
        # Inputs are in [0, 1), so relu(x) = x: a quarter of the outputs take their neighbour's
        # value, which differs by about 1/3 on average.
        2: ("copy-paste bug in the float4 path: the w lane is computed from z",
            [("      v.w = op(v.w);", "      v.w = op(v.z);")]),
        3: ("missing semicolon", [("const int64_t n = xc.numel();", "const int64_t n = xc.numel()")]),
    },
    "20_LeakyReLU.py": {
        1: ("128 threads per block, at most 32 blocks per SM", ELEMENTWISE_TO_128),
        # Positive inputs (all of them here) come out multiplied by 0.01 instead of unchanged.
        2: ("branches swapped: the slope is applied to positive values",
            [("return v > 0.f ? v : v * slope;", "return v > 0.f ? v * slope : v;")]),
        3: ("undeclared identifier negative_slope_",
            [("static_cast<float>(negative_slope);", "static_cast<float>(negative_slope_);")]),
    },
    "21_Sigmoid.py": {
        1: ("512 threads per block, at most 8 blocks per SM", ELEMENTWISE_TO_512),
        # Computes sigmoid(-x) = 1 - sigmoid(x): off by 2 sigmoid(x) - 1, up to 0.46 on [0, 1).
        2: ("sign error: 1 / (1 + exp(x))", [("expf(-v)", "expf(v)")]),
        3: ("expf called with two arguments", [("expf(-v)", "expf(-v, 1.f)")]),
    },
    "22_Tanh.py": {
        1: ("128 threads per block, at most 32 blocks per SM", ELEMENTWISE_TO_128),
        # (e^x - e^-x) / (2 e^x) = (1 - e^-2x) / 2: at x = 0.5 it gives 0.316 instead of 0.462.
        2: ("tanh by its exponential formula with a typo in the denominator",
            [("{ return tanhf(v); }", "{ return (expf(v) - expf(-v)) / (expf(v) + expf(v)); }")]),
        3: ("functor renamed but not its uses", [("struct TanhOp {", "struct TanhOperator {")]),
    },
    "23_Softmax.py": {
        1: ("256 threads per block instead of 512", [("constexpr int kThreads = 512;", "constexpr int kThreads = 256;")]),
        # Divides by the row maximum (about 1) instead of the sum of exponentials (about 6.8e5):
        # outputs near exp(x - 1) in [0.37, 1] instead of about 2.5e-6. A smaller error could pass
        # KernelBench, whose atol of 1e-4 is 40 times the reference's values here.
        2: ("typo: normalized by the maximum instead of the sum",
            [("const float inv = 1.f / s;", "const float inv = 1.f / m;")]),
        3: ("__shfl_xor_sync called without its lane mask",
            [("__shfl_xor_sync(0xffffffffu, m, o)", "__shfl_xor_sync(m, o)", 2)]),
    },
    "24_LogSoftmax.py": {
        1: ("256 threads per block instead of 512", [("constexpr int kThreads = 512;", "constexpr int kThreads = 256;")]),
        # Leaves out the row maximum (about 1.0) from the log-sum-exp: every output is off by it.
        2: ("log-sum-exp without the maximum added back", [("const float lse = m + logf(s);", "const float lse = logf(s);")]),
        3: ("sizes() called with an argument", [("const int64_t cols = xc.size(-1);", "const int64_t cols = xc.sizes(-1);")]),
    },
    "26_GELU_.py": {
        1: ("512 threads per block, at most 8 blocks per SM", ELEMENTWISE_TO_512),
        # erf(x * sqrt(2)) instead of erf(x / sqrt(2)): at x = 0.5 it gives 0.421 instead of 0.346.
        2: ("wrong constant: multiplies by sqrt(2) instead of dividing",
            [("erff(v * 0.70710678118654752440f)", "erff(v * 1.41421356237309504880f)")]),
        3: ("undeclared function erf_f", [("erff(v * 0.70710678118654752440f)", "erf_f(v * 0.70710678118654752440f)")]),
    },
    "36_RMSNorm_.py": {
        1: ("128 threads per block, at most 32 blocks per SM",
            [("constexpr int kThreads = 256;", "constexpr int kThreads = 128;"),
             ("/ kThreads, sms * 16)", "/ kThreads, sms * 32)")]),
        # mean(x^2) over 63 instead of 64 features: outputs scaled by sqrt(63/64), off by 0.8% of
        # values near 1, about 50 times the tolerance.
        2: ("divides the sum of squares by C - 1",
            [("sqrtf(sum_sq / static_cast<float>(C) + eps)", "sqrtf(sum_sq / static_cast<float>(C - 1) + eps)", 2)]),
        3: ("runtime value as a template argument",
            [("rms_norm_cached_kernel<16><<<", "rms_norm_cached_kernel<C><<<")]),
    },
    "40_LayerNorm.py": {
        1: ("512 threads per block instead of 256", [("constexpr int kThreads = 256;", "constexpr int kThreads = 512;")]),
        # Every thread starts its sum at 1: each row's sum gains 256 per block (66 blocks per
        # row on 132 SMs), the mean moves by 0.004 and every output by about 0.014.
        2: ("wrong reduction init: the partial sums start at 1",
            [("  float s = 0.f;\n  for (int64_t j = c.begin + threadIdx.x; j < c.end; j += kThreads) s += xr[j];",
              "  float s = 1.f;\n  for (int64_t j = c.begin + threadIdx.x; j < c.end; j += kThreads) s += xr[j];")]),
        3: ("std::min over an initializer list of mixed integer types",
            [("std::min<int64_t>({want, most, 65536})", "std::min({want, most, 65536})")]),
    },
    "47_Sum_reduction_over_a_dimension.py": {
        1: ("16 thread rows per block instead of 8",
            [("constexpr int kSplit = 8;  // thread rows", "constexpr int kSplit = 16;  // thread rows")]),
        # The last thread row's partial (1/8 of each column's 4096 values, about 256) is dropped.
        2: ("off-by-one in the bound: the last partial sum is not added",
            [("for (int k = 0; k < kSplit; ++k) s += part[k][threadIdx.x];",
              "for (int k = 0; k < kSplit - 1; ++k) s += part[k][threadIdx.x];")]),
        3: ("misspelled __syncthreads",
            [("    part[threadIdx.y][threadIdx.x] = total;\n    __syncthreads();",
              "    part[threadIdx.y][threadIdx.x] = total;\n    __syncthread();")]),
    },
    "51_Argmax_over_a_dimension.py": {
        1: ("16 thread rows per block instead of 8", [("constexpr int kSplit = 8;", "constexpr int kSplit = 16;")]),
        # Index 4095 is never considered: in about 1 column of 4096 (128 of each trial's 524,160)
        # the maximum sits there and the answer is another index.
        2: ("off-by-one in the bound: the last element of each column is skipped",
            [("for (int64_t r = threadIdx.y; r < R; r += kSplit) {", "for (int64_t r = threadIdx.y; r < R - 1; r += kSplit) {")]),
        3: ("function called with too few arguments", [("better(v, r, bv, bi)", "better(v, r, bv)")]),
    },
    "88_MinGPTNewGelu.py": {
        1: ("128 threads per block, at most 32 blocks per SM", ELEMENTWISE_TO_128),
        # 2/pi instead of sqrt(2/pi) inside tanh: at x = 0.9 the output is off by about 0.044.
        2: ("wrong constant: 2/pi instead of sqrt(2/pi)", [("0.7978845608028654f", "0.6366197723675814f")]),
        3: ("pointer passed where a float is expected", [("tanhf(inner)", "tanhf(&inner)")]),
    },
    "89_cumsum.py": {
        1: ("512 threads per block (tiles of 2048) instead of 256",
            [("constexpr int kThreads = 256;", "constexpr int kThreads = 512;")]),
        # Each tile of 1024 values restarts from zero: from the second tile on, outputs miss the
        # sum of all earlier tiles (hundreds).
        2: ("the carry from earlier tiles is left out",
            [("const float offset = carry + ((warp > 0 ? warp_incl[warp - 1] : 0.f) + excl);",
              "const float offset = (warp > 0 ? warp_incl[warp - 1] : 0.f) + excl;")]),
        3: ("make_float4 with three arguments",
            [("make_float4(v[0], v[1], v[2], v[3])", "make_float4(v[0], v[1], v[2])")]),
    },
    "94_MSELoss.py": {
        1: ("512 threads per block, at most 4 blocks per SM",
            [("constexpr int kThreads = 256;", "constexpr int kThreads = 512;"),
             ("/ kThreads, sms * 8)", "/ kThreads, sms * 4)")]),
        # Adds only half of the warps' sums (a 64-wide wavefront assumed), in both the per-block
        # and the final reduction: the mean comes out near a quarter of its value (0.15 to 0.33).
        2: ("warp count computed for 64-wide warps: half of the warp sums are dropped",
            [("for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];",
              "for (int w = 0; w < kThreads / 64; ++w) total += warp_sums[w];")]),
        3: ("function called with too many arguments",
            [("block_sum(static_cast<double>(s));", "block_sum(static_cast<double>(s), kThreads);")]),
    },
    "100_HingeLoss.py": {
        1: ("512 threads per block, at most 4 blocks per SM",
            [("constexpr int kThreads = 256;", "constexpr int kThreads = 512;"),
             ("std::min<int64_t>(rows, sms * 8)", "std::min<int64_t>(rows, sms * 4)")]),
        # The mean divides by the 32768 rows instead of the 2^30 elements: 32768 times too large.
        2: ("mean over the row count instead of the element count",
            [("blocks, n, out.data_ptr<float>());", "blocks, rows, out.data_ptr<float>());")]),
        3: ("member function used without calling it",
            [("TORCH_CHECK(predictions.is_cuda() && targets.is_cuda()", "TORCH_CHECK(predictions.is_cuda && targets.is_cuda()")]),
    },
}

KINDS = {0: "as_is", 1: "variant", 2: "wrong", 3: "compile_error"}


def apply_edits(text, edits, where):
    for edit in edits:
        old, new, count = edit if len(edit) == 3 else (*edit, 1)
        found = text.count(old)
        if found != count:
            raise SystemExit("{}: expected {} occurrence(s) of {!r}, found {}".format(where, count, old, found))
        text = text.replace(old, new)
    return text


def extension_name(text, where):
    names = re.findall(r'^\s*name="([A-Za-z0-9_]+)",$', text, re.M)
    if len(names) != 1:
        raise SystemExit("{}: expected one load_inline name=\"...\", found {}".format(where, names))
    return names[0]


def build():
    """{relative path: text} of everything the workload folder must hold."""
    manifest = json.loads((SOURCE_DIR / "manifest.json").read_text())
    # The problems the workload covers are the ones EDITS names; the corpus may hold more.
    honest = [e for e in manifest if "expect" not in e and e["candidate"] in EDITS]
    files, entries = {}, []
    for entry in honest:
        source_name = entry["candidate"]
        problem = int(Path(entry["problem"]).name.split("_", 1)[0])
        text = (SOURCE_DIR / source_name).read_text()
        name = extension_name(text, source_name)
        for sample in range(4):
            kind = KINDS[sample]
            out = text
            change = "none: tests/gpu/kernelbench_l1/" + source_name
            if sample:
                where = "{} sample {}".format(source_name, sample)
                change, edits = EDITS[source_name][sample]
                out = apply_edits(text, edits, where)
                out = apply_edits(out, [('name="{}",'.format(name), 'name="{}_s{}",'.format(name, sample))], where)
                out = "# eval_throughput workload, problem {} sample {} ({}): {}.\n".format(
                    problem, sample, kind, change) + out
            file_name = "level_1_problem_{}_sample_{}_kernel.py".format(problem, sample)
            files[file_name] = out
            entries.append({"file": file_name, "problem": problem, "problem_file": entry["problem"],
                            "sample": sample, "kind": kind, "expect": EXPECT[kind], "change": change})
    unused = set(EDITS) - {e["candidate"] for e in honest}
    if unused:
        raise SystemExit("edits for files not in the manifest: {}".format(sorted(unused)))
    workload = {
        "about": "Generated by benchmarks/eval_throughput/make_workload.py from tests/gpu/kernelbench_l1; "
                 "do not edit by hand. expect: the verdict every evaluator should give (compiled, correct).",
        "level": 1,
        "candidates": entries,
    }
    files["workload.json"] = json.dumps(workload, indent=1) + "\n"
    return files


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with workload/ instead of writing it")
    args = parser.parse_args()
    files = build()
    if args.check:
        present = {p.name for p in OUT_DIR.glob("*")} if OUT_DIR.is_dir() else set()
        problems = ["missing: " + n for n in sorted(set(files) - present)]
        problems += ["not generated: " + n for n in sorted(present - set(files))]
        problems += ["differs: " + n for n in sorted(set(files) & present) if (OUT_DIR / n).read_text() != files[n]]
        for p in problems:
            print(p)
        print("{}: {} files in {}".format("FAILED" if problems else "ok", len(files), OUT_DIR))
        return 1 if problems else 0
    OUT_DIR.mkdir(exist_ok=True)
    for stale in OUT_DIR.glob("*"):
        if stale.name not in files:
            stale.unlink()
    for name, text in files.items():
        (OUT_DIR / name).write_text(text)
    candidates = json.loads(files["workload.json"])["candidates"]
    print("wrote {} candidates over {} problems to {}".format(
        len(candidates), len({c["problem"] for c in candidates}), OUT_DIR))
    return 0


if __name__ == "__main__":
    sys.exit(main())
