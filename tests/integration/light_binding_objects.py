#!/usr/bin/env python3
"""The light binding file (kbrl_fast_build.py, light_binding_header) compiles to the same code as
torch's own torch/extension.h for binding files of the shapes that load_inline writes: the
candidate's declarations (arguments and results of every kind that pybind11 converts: tensors,
lists, optionals, tuples, scalars, dtypes, strings, devices) and the PYBIND11_MODULE block.
Compiled without optimization (so that the inliner's unit-size heuristics do not differ), the
objects call the same external functions (libtorch, libpython: same overloads, same pybind11 type
casters) and define every function the full header's object defines; the light one may define a
few more inline helpers (the full headers' constants and constexpr contexts fold some away). The
full headers' unused local constants (interned strings) are not compared. A binding file that
needs the C++ frontend (torch::nn) does not compile with the light header, so it is built again
with the full one.

usage: light_binding_objects.py WORK_DIR   (exit status 0 when every check passed, 1 when one
failed, 77 (CTest's skip code, tests/integration/CMakeLists.txt) without g++ and nm or with a torch
without CUDA: light headers are not used there)
"""
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "libkbrl", "worker"))

import torch  # noqa: E402

import kbrl_fast_build  # noqa: E402

DECLARATIONS = """
torch::Tensor add_one(torch::Tensor x);
std::vector<torch::Tensor> split_two(const torch::Tensor& x, int64_t dim, double scale, bool flag);
std::tuple<at::Tensor, at::Tensor> pair(at::Tensor a, c10::optional<at::Tensor> b);
torch::Tensor with_scalar(torch::Tensor x, at::Scalar s, c10::ScalarType dtype);
torch::Tensor with_list(std::vector<torch::Tensor> xs, std::vector<int64_t> sizes, at::IntArrayRef shape);
torch::Tensor with_options(torch::Tensor x, std::optional<double> eps, std::string mode, torch::Device device);
void in_place(torch::Tensor& out, const torch::Tensor& x);
"""
NAMES = ["add_one", "split_two", "pair", "with_scalar", "with_list", "with_options", "in_place"]
NEEDS_FRONTEND = """
torch::Tensor with_module(torch::Tensor x, int64_t n) {
  torch::nn::Linear layer(n, n);
  return layer->forward(x);
}
"""

FAILED = []
SKIPPED = 77  # nothing checked: CTest reports the test as skipped, not passed


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        FAILED.append(what)


def binding_file(cpp_sources, names):
    # load_inline's main.cpp: torch/extension.h, the cpp_sources, then one m.def per function.
    defs = "".join('m.def("{0}", torch::wrap_pybind_function({0}), "{0}");\n'.format(n) for n in names)
    return "#include <torch/extension.h>\n" + cpp_sources + "\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n" + defs + "}\n"


def compile_object(source, out, cpath):
    include = os.path.join(os.path.dirname(torch.__file__), "include")
    command = ["g++", "-DTORCH_EXTENSION_NAME=kbrl_binding_check", "-DTORCH_API_INCLUDE_EXTENSION_H",
               "-isystem", include, "-isystem", os.path.join(include, "torch", "csrc", "api", "include"),
               "-isystem", sysconfig.get_paths()["include"], "-fPIC", "-std=c++17", "-O0", "-c", source, "-o", out]
    env = dict(os.environ)
    env.pop("CPATH", None)
    if cpath:
        env["CPATH"] = cpath
    proc = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return proc.returncode == 0, proc.stdout.decode("utf-8", "replace")


def global_symbols(obj):
    """{(type, name)} of an object's global, weak and undefined symbols (nm)."""
    out = subprocess.run(["nm", obj], stdout=subprocess.PIPE, check=True).stdout.decode()
    symbols = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and (parts[-2].isupper() or parts[-2] in ("u", "v", "w")):
            symbols.add((parts[-2], parts[-1]))
    return symbols


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    if shutil.which("g++") is None or shutil.which("nm") is None or not torch.version.cuda:
        print("no g++ or a torch without CUDA: light headers are not used here; skipped")
        return SKIPPED
    work = sys.argv[1]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    fast = kbrl_fast_build.FastBuild(torch, {"pch": False, "light_headers": True, "parallel_passes": True,
                                             "binding_early": True, "dir": os.path.join(work, "cache")}, tempfile.mkdtemp(dir=work))
    header = fast.light_binding_header()
    check(header is not None, "torch's headers are laid out as the light binding header expects")
    if header is None:
        return 1
    tiers = dict(fast.light_tiers())
    check(set(tiers) == {"minimal", "types"}, "both light tiers are there")
    binding_root = os.path.join(work, "binding")
    os.makedirs(os.path.join(binding_root, "torch"))
    with open(os.path.join(binding_root, "torch", "extension.h"), "w") as f:
        f.write(header)

    main_cpp = os.path.join(work, "main.cpp")
    with open(main_cpp, "w") as f:
        f.write(binding_file(DECLARATIONS, NAMES))
    ok, log = compile_object(main_cpp, os.path.join(work, "full.o"), None)
    check(ok, "the binding file compiles with torch's own headers" + ("" if ok else ":\n" + log[-3000:]))
    for tier, shadow in sorted(tiers.items()):
        light = os.path.join(work, "light-{}.o".format(tier))
        ok, log = compile_object(main_cpp, light, binding_root + ":" + shadow)
        check(ok, "it compiles with the light binding header, tier " + tier + ("" if ok else ":\n" + log[-3000:]))
        if ok:
            full_syms, light_syms = global_symbols(os.path.join(work, "full.o")), global_symbols(light)
            check(len(full_syms) > 1000, "the full object has its symbols ({})".format(len(full_syms)))
            undefined = {n for t, n in full_syms if t == "U"}, {n for t, n in light_syms if t == "U"}
            check(undefined[0] == undefined[1], "tier {}: the same external functions are called{}".format(
                tier, "" if undefined[0] == undefined[1] else ": " + str(sorted(undefined[0] ^ undefined[1])[:10])))
            missing = full_syms - light_syms
            check(not missing, "tier {}: every function of the full object is defined{}".format(
                tier, "" if not missing else ": " + str(sorted(missing)[:10])))
            extra = {(t, n) for t, n in light_syms - full_syms if t != "W"}
            check(not extra, "tier {}: nothing else but inline helpers is added{}".format(
                tier, "" if not extra else ": " + str(sorted(extra)[:10])))

    frontend_cpp = os.path.join(work, "frontend.cpp")
    with open(frontend_cpp, "w") as f:
        f.write(binding_file(NEEDS_FRONTEND, ["with_module"]))
    ok, _ = compile_object(frontend_cpp, os.path.join(work, "frontend-full.o"), None)
    check(ok, "a binding file using torch::nn compiles with torch's own headers")
    ok, log = compile_object(frontend_cpp, os.path.join(work, "frontend-light.o"),
                             binding_root + ":" + tiers["minimal"])
    check(not ok and "nn" in log, "and does not compile with the light one (it is built again with the full one)")

    print("{} failed".format(len(FAILED)) if FAILED else "all passed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
