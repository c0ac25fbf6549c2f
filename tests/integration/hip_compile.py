#!/usr/bin/env python3
"""kbrl's HIP build path, as far as a machine without an AMD GPU and without ROCm's torch goes.

On a HIP lane the evaluator starts each worker with PYTORCH_ROCM_ARCH=<evaluator.gpu_arch>
(libkbrl/src/eval/local_evaluator.cpp), and the candidate's load_inline call builds its
cuda_sources with hipcc, through ROCm's torch: the worker adds nothing to that compile line
(kbrl_fast_build.py's light headers and parallel passes are nvcc-only, and it changes no byte of
build.ninja). ROCm's torch cannot be installed here, so this test has the installed torch's own
cpp_extension module take its ROCm branch (its IS_HIP_EXTENSION switch on, ROCM_HOME found by
its own _find_rocm_home, torch.version reporting HIP and no CUDA, as ROCm's torch does), in a
child process whose environment has PYTORCH_ROCM_ARCH set as the lane sets it, and lets
load_inline write its build.ninja (hipify included). Its ninja build is not started: ninja itself
gives the exact compile command of the HIP object, which is then run here.

Checked for each PYTORCH_ROCM_ARCH value (one architecture and a list of two):
  - the command line (what needs ROCm's torch is checked by this alone): the compiler is hipcc
    from ROCM_HOME; the --offload-arch= flags are exactly PYTORCH_ROCM_ARCH's entries, in order,
    and -fno-gpu-rdc is there; every flag of torch's COMMON_HIP_FLAGS and COMMON_HIPCC_FLAGS is;
  - the compile: that command, run with hipcc under the same environment, builds a small HIP
    kernel and its host launcher (plain HIP, no torch headers: load_inline is called with
    no_implicit_headers=True, which changes the sources' text and no flag); the object's
    embedded bundle holds one code object per architecture and nothing else, and each is an
    AMDGPU ELF for that target (its amdhsa.target note) that defines the kernel and its kernel
    descriptor; the object linked into a shared library against the HIP runtime keeps them.

The only flag left out of torch's command is "-isystem /usr/include", which torch adds as ROCm's
include directory (ROCM_HOME/include): Debian installs HIP under /usr, so that directory is the
system's own, and naming it with -isystem reorders it before the C++ library's wrappers, whose
#include_next <math.h> then fails. With ROCm's own layout (/opt/rocm) the flag is harmless. The
link leaves out torch's libraries (c10_hip, torch_hip and the rest: a ROCm torch's) and the
binding object main.o (it needs torch's headers), and keeps the HIP runtime, -lamdhip64.

Two more values are tried because kbrl's documented targets use them: gfx942 (MI300) and gfx950
(MI355). Their command lines are checked like the others; where this hipcc does not know the
architecture (Debian 12's hipcc 5.2.3 with clang 15 knows neither), the test says so and goes on,
and any other compile failure is a failure. Where a newer hipcc builds them, they are checked in
full.

Nothing here runs on AMD hardware: the code objects are built and inspected, never loaded.

usage: hip_compile.py --work DIR   (exit status 0 when every check passed, 1 when one failed,
77 (CTest's skip code, tests/integration/CMakeLists.txt) without hipcc: scripts/deps.sh installs
Debian 12's with KBRL_HIPCC=1)
"""
import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

SKIPPED = 77
FAILED = []
EXTENSION = "kbrl_hip_compile"

# (case, PYTORCH_ROCM_ARCH, whether this compiler must build it)
CASES = [
    ("gfx90a", "gfx90a", True),
    ("gfx90a_gfx1030", "gfx90a;gfx1030", True),
    ("gfx942", "gfx942", False),
    ("gfx950", "gfx950", False),
]

KERNEL = "kbrl_add_relu_kernel"
LAUNCHER = "kbrl_add_relu"
HIP_SOURCE = r"""
#include <hip/hip_runtime.h>
#include <cstdint>

// out[i] = max(a[i] + b[i], 0) over a grid-stride loop.
__global__ void kbrl_add_relu_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                     float* __restrict__ out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = a[i] + b[i];
    out[i] = v > 0.0f ? v : 0.0f;
  }
}

// The host launcher: the launch's HIP error code (0 is hipSuccess).
extern "C" int kbrl_add_relu(const float* a, const float* b, float* out, int64_t n, hipStream_t stream) {
  if (n <= 0) return 0;
  const int threads = 256;
  const int64_t wanted = (n + threads - 1) / threads;
  const unsigned int blocks = static_cast<unsigned int>(wanted < 65535 ? wanted : 65535);
  hipLaunchKernelGGL(kbrl_add_relu_kernel, dim3(blocks), dim3(threads), 0, stream, a, b, out, n);
  return static_cast<int>(hipGetLastError());
}
"""

# What a compiler says of an architecture it cannot target: one it does not know, or one whose
# device libraries its ROCm lacks.
UNSUPPORTED_ARCH = [r"invalid target ID '?{arch}'?", r"unsupported (?:HIP|CUDA) gpu architecture:? '?{arch}'?",
                    r"cannot find ROCm device library for {arch}"]


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what, flush=True)
    if not condition:
        FAILED.append(what)
    return condition


def note(what):
    print("note " + what, flush=True)


def run(argv, **kwargs):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600, **kwargs)


# ---- the child: a worker's load_inline call on torch's ROCm branch ------------------------------

def derive(build_dir, hip_version, result_path):
    """Runs in a child process whose environment has PYTORCH_ROCM_ARCH: load_inline writes
    build_dir/build.ninja as ROCm's torch would; what torch used goes to result_path."""
    import torch
    import torch.utils.cpp_extension as ce

    emulated = not ce.IS_HIP_EXTENSION
    if emulated:
        # ROCm's torch reports a HIP version and no CUDA version; cpp_extension reads both while
        # it writes the build file (no nvcc dependency flags on ROCm, for one).
        torch.version.hip = hip_version
        torch.version.cuda = None
        ce.ROCM_HOME = ce._find_rocm_home()
        ce.HIP_HOME = ce._join_rocm_home("hip")
        ce.IS_HIP_EXTENSION = True

    class Written(Exception):
        pass

    def stop_before_ninja(*args, **kwargs):
        raise Written()

    ce._run_ninja_build = stop_before_ninja
    try:
        ce.load_inline(name=EXTENSION, cpp_sources="", cuda_sources=HIP_SOURCE, build_directory=build_dir,
                       no_implicit_headers=True)
        raise SystemExit("load_inline returned without reaching its ninja build")
    except Written:
        pass
    with open(result_path, "w") as f:
        json.dump({
            "torch": torch.__version__,
            "emulated": emulated,
            "rocm_home": ce.ROCM_HOME,
            "hipcc": ce._get_hipcc_path(),
            "torch_lib": ce.TORCH_LIB_PATH,
            "common_hip_flags": list(ce.COMMON_HIP_FLAGS),
            "common_hipcc_flags": list(ce.COMMON_HIPCC_FLAGS),
            "arch_flags": ce._get_rocm_arch_flags(),
        }, f)


# ---- inspection of the outputs ------------------------------------------------------------------

def ninja_edges(build_dir):
    """{rule: [(output, input)]} of build.ninja's build lines."""
    edges = {}
    with open(os.path.join(build_dir, "build.ninja")) as f:
        for line in f:
            m = re.match(r"build (\S+): (\S+) ?(.*)$", line.rstrip("\n"))
            if m:
                edges.setdefault(m.group(2), []).append((m.group(1), m.group(3)))
    return edges


def ninja_command(build_dir, target):
    """The command ninja would run last to build target (from ninja itself)."""
    out = run(["ninja", "-C", build_dir, "-t", "commands", target])
    if out.returncode != 0:
        raise RuntimeError("ninja -t commands {}: {}".format(target, out.stdout))
    return [line for line in out.stdout.splitlines() if line.strip()][-1]


def bundled_targets(tools, binary, scratch):
    """The offload bundle entries in binary's .hip_fatbin section, or None without one."""
    fatbin = scratch + ".hip_fatbin"
    dump = run([tools["llvm-objcopy"], "--dump-section", ".hip_fatbin=" + fatbin, binary, scratch + ".discard"])
    if dump.returncode != 0 or not os.path.exists(fatbin):
        print(dump.stdout)
        return None, fatbin
    listing = run([tools["clang-offload-bundler"], "--list", "--type=o", "--input=" + fatbin])
    if listing.returncode != 0:
        print(listing.stdout)
        return None, fatbin
    return [line.strip() for line in listing.stdout.splitlines() if line.strip()], fatbin


def gpu_entries(entries):
    """{architecture: bundle entry} of the AMDGPU entries (hip-amdgcn-amd-amdhsa--gfx90a or
    hipv4-amdgcn-amd-amdhsa--gfx90a, by code object version)."""
    found = {}
    for entry in entries:
        m = re.match(r"^hip[^-]*-amdgcn-amd-amdhsa-[^-]*-(\S+)$", entry)
        if m:
            found.setdefault(m.group(1), []).append(entry)
    return found


def check_code_object(tools, fatbin, entry, arch, where):
    code_object = fatbin + "." + arch + ".co"
    out = run([tools["clang-offload-bundler"], "--unbundle", "--type=o", "--input=" + fatbin,
               "--targets=" + entry, "--output=" + code_object])
    unbundled = out.returncode == 0 and os.path.exists(code_object) and os.path.getsize(code_object) > 0
    if not check(unbundled, "{}: the {} code object unbundles{}".format(where, arch, "" if unbundled else ":\n" + out.stdout)):
        return
    elf = run([tools["llvm-readelf"], "--file-headers", "--notes", "--symbols", code_object]).stdout
    check(re.search(r"Machine:\s+EM_AMDGPU", elf) is not None,
          "{}: the {} code object is an AMDGPU ELF".format(where, arch))
    targets = re.findall(r"amdhsa\.target:\s+'?([\w:+-]+)", elf)
    check(targets == ["amdgcn-amd-amdhsa--" + arch],
          "{}: its amdhsa.target note names {} ({})".format(where, arch, ", ".join(targets) or "none"))
    kernel = [line.split() for line in elf.splitlines() if KERNEL in line and re.match(r"\s*\d+:", line)]
    functions = [f for f in kernel if len(f) >= 8 and f[3] == "FUNC" and f[6] != "UND" and int(f[2]) > 0
                 and not f[7].endswith(".kd")]
    descriptors = [f for f in kernel if len(f) >= 8 and f[3] == "OBJECT" and f[7].endswith(".kd")]
    check(bool(functions) and bool(descriptors),
          "{}: it defines the kernel {} with code ({} bytes) and its kernel descriptor".format(
              where, functions[0][7] if functions else KERNEL, functions[0][2] if functions else 0))


def check_bundle(tools, binary, archs, where):
    entries, fatbin = bundled_targets(tools, binary, binary)
    if not check(entries is not None, "{}: has a .hip_fatbin offload bundle".format(where)):
        return
    found = gpu_entries(entries)
    check(sorted(found) == sorted(archs) and all(len(v) == 1 for v in found.values()),
          "{}: its bundle holds one code object for each of {} ({})".format(where, ", ".join(archs), ", ".join(entries)))
    for arch in archs:
        if arch in found:
            check_code_object(tools, fatbin, found[arch][0], arch, where)


def find_tools(compile_argv, build_dir, env):
    """clang-offload-bundler, llvm-objcopy and llvm-readelf of the LLVM that hipcc drives (hipcc
    -### names its bundler): Debian's /usr/lib/llvm-15/bin, ROCm's /opt/rocm/llvm/bin."""
    out = run(compile_argv + ["-###"], cwd=build_dir, env=env)
    m = re.search(r'"([^"]*/)clang-offload-bundler"', out.stdout)
    if not m:
        return None, out.stdout
    tools = {name: os.path.join(m.group(1), name) for name in ("clang-offload-bundler", "llvm-objcopy", "llvm-readelf")}
    missing = [path for path in tools.values() if not os.access(path, os.X_OK)]
    return (None, "missing: " + ", ".join(missing)) if missing else (tools, "")


# ---- one PYTORCH_ROCM_ARCH value ----------------------------------------------------------------

def run_case(case, rocm_arch, must_build, work, hip_version, state):
    print("-- PYTORCH_ROCM_ARCH={}".format(rocm_arch), flush=True)
    archs = rocm_arch.split(";")
    case_dir = os.path.join(work, case)
    shutil.rmtree(case_dir, ignore_errors=True)
    build_dir = os.path.join(case_dir, "build")
    os.makedirs(build_dir)
    env = dict(os.environ, PYTORCH_ROCM_ARCH=rocm_arch)  # as the HIP lane sets it for its worker
    result_path = os.path.join(case_dir, "torch.json")
    child = run([sys.executable, os.path.abspath(__file__), "--derive", build_dir, "--hip-version", hip_version,
                 "--result", result_path], env=env)
    if not check(child.returncode == 0 and os.path.exists(result_path),
                 "load_inline on torch's ROCm branch writes its build file" +
                 ("" if child.returncode == 0 else ":\n" + child.stdout[-4000:])):
        return
    with open(result_path) as f:
        torch_used = json.load(f)
    if not state.get("reported"):
        state["reported"] = True
        note("torch {} ({}), ROCM_HOME={}".format(
            torch_used["torch"], "its ROCm branch taken here, not a ROCm build" if torch_used["emulated"] else "a ROCm build",
            torch_used["rocm_home"]))

    # The command line.
    edges = ninja_edges(build_dir)
    hip_edges = edges.get("cuda_compile", [])
    if not check(len(hip_edges) == 1, "build.ninja has one hipcc compile ({})".format(hip_edges)):
        return
    hip_object, hip_source = hip_edges[0]
    command = ninja_command(build_dir, hip_object)
    argv = shlex.split(command)
    print("     " + command, flush=True)
    check(argv[0] == torch_used["hipcc"] and os.path.basename(argv[0]) == "hipcc",
          "the compiler is hipcc from ROCM_HOME ({})".format(argv[0]))
    offload = [a for a in argv if a.startswith("--offload-arch=") or "amdgpu-target" in a]
    check(offload == ["--offload-arch=" + a for a in archs],
          "the --offload-arch= flags are PYTORCH_ROCM_ARCH's, in order: {}".format(" ".join(offload)))
    check([f for f in torch_used["arch_flags"] if f.startswith("--offload-arch=")] == offload,
          "and they are torch's _get_rocm_arch_flags() under this environment")
    check("-fno-gpu-rdc" in argv, "-fno-gpu-rdc (one self-contained code object per architecture)")
    common = torch_used["common_hip_flags"] + torch_used["common_hipcc_flags"]
    absent = [f for f in common if f not in argv]
    check(bool(common) and not absent, "torch's COMMON_HIP_FLAGS and COMMON_HIPCC_FLAGS are all there{}".format(
        " (missing: " + " ".join(absent) + ")" if absent else ""))
    check(argv[argv.index("-c") + 1] == hip_source if "-c" in argv else False,
          "it compiles load_inline's (hipified) source {}".format(os.path.basename(hip_source)))

    # The compile, with Debian's layout adjustment (the module docstring says why).
    compile_argv, dropped = [], []
    i = 0
    while i < len(argv):
        if argv[i] == "-isystem" and i + 1 < len(argv) and os.path.realpath(argv[i + 1]) == "/usr/include":
            dropped += argv[i:i + 2]
            i += 2
            continue
        compile_argv.append(argv[i])
        i += 1
    if dropped:
        note("left out: {} (ROCM_HOME/include is the system's own include directory here)".format(" ".join(dropped)))
    if "tools" not in state:
        state["tools"], why = find_tools(compile_argv, build_dir, env)
        if state["tools"] is None:
            check(False, "the LLVM tools beside hipcc's clang are found:\n" + why[-4000:])
    tools = state["tools"]
    if tools is None:
        return
    started = time.monotonic()
    built = run(compile_argv, cwd=build_dir, env=env)
    seconds = time.monotonic() - started
    object_path = os.path.join(build_dir, hip_object)
    if built.returncode != 0 and not must_build:
        reasons = [m.group(0) for arch in archs for pattern in UNSUPPORTED_ARCH
                   for m in [re.search(pattern.format(arch=re.escape(arch)), built.stdout)] if m]
        if check(bool(reasons), "hipcc either builds {} or says it cannot target it{}".format(
                rocm_arch, "" if reasons else ":\n" + built.stdout[-4000:])):
            note("this hipcc cannot target {}: {}".format(rocm_arch, reasons[0]))
            state["rejected"].append(rocm_arch)
        return
    if not check(built.returncode == 0 and os.path.exists(object_path),
                 "hipcc builds {} for {} ({:.1f} s){}".format(hip_object, rocm_arch, seconds,
                                                            "" if built.returncode == 0 else ":\n" + built.stdout[-4000:])):
        return
    state["built"].extend(a for a in archs if a not in state["built"])
    check_bundle(tools, object_path, archs, hip_object)
    symbols = run([tools["llvm-readelf"], "--symbols", object_path]).stdout
    check(re.search(r"FUNC\s+GLOBAL\s+DEFAULT\s+\d+\s+" + LAUNCHER + r"$", symbols, re.M) is not None,
          "{}: defines the host launcher {}".format(hip_object, LAUNCHER))

    # The link: ninja's link command without the binding object and torch's libraries.
    library = next((out for out, _ in edges.get("link", [])), None)
    if not check(library is not None, "build.ninja links a library"):
        return
    link = shlex.split(ninja_command(build_dir, library))
    kept, left_out = [], []
    for arg in link:
        torch_lib = arg == "-L" + torch_used["torch_lib"] or re.match(r"-l(c10|torch)", arg)
        other_object = arg.endswith(".o") and arg != hip_object
        (left_out if torch_lib or other_object else kept).append(arg)
    check("-lamdhip64" in kept and hip_object in kept, "the link keeps {} and the HIP runtime: {}".format(
        hip_object, " ".join(kept)))
    linked = run(kept, cwd=build_dir, env=env)
    library_path = os.path.join(build_dir, library)
    if not check(linked.returncode == 0 and os.path.exists(library_path), "{} links (without {}){}".format(
            library, " ".join(left_out), "" if linked.returncode == 0 else ":\n" + linked.stdout[-4000:])):
        return
    dynamic = run([tools["llvm-readelf"], "--dynamic", "--dyn-symbols", library_path]).stdout
    check(re.search(r"\(NEEDED\)\s+Shared library: \[libamdhip64\.so", dynamic) is not None,
          "{}: needs the HIP runtime (libamdhip64)".format(library))
    check(re.search(r"FUNC\s+GLOBAL\s+DEFAULT\s+\d+\s+" + LAUNCHER + r"$", dynamic, re.M) is not None,
          "{}: exports {}".format(library, LAUNCHER))
    check_bundle(tools, library_path, archs, library)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", help="scratch directory (its per-case subdirectories are replaced)")
    parser.add_argument("--derive", help=argparse.SUPPRESS)
    parser.add_argument("--hip-version", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.derive:
        derive(args.derive, args.hip_version, args.result)
        return 0
    if not args.work:
        parser.error("--work is required")
    if shutil.which("hipcc") is None:
        print("hip_compile: no hipcc on PATH (scripts/deps.sh installs Debian 12's with KBRL_HIPCC=1), nothing checked")
        return SKIPPED
    started = time.monotonic()
    version = run(["hipconfig", "--version"]) if shutil.which("hipconfig") else None
    hip_version = "0.0"
    if version is not None and version.returncode == 0 and version.stdout.strip():
        hip_version = version.stdout.strip().splitlines()[-1]
    note("hipcc {} (HIP {})".format(shutil.which("hipcc"), hip_version))
    os.makedirs(args.work, exist_ok=True)
    state = {"built": [], "rejected": []}
    for case, rocm_arch, must_build in CASES:
        run_case(case, rocm_arch, must_build, os.path.abspath(args.work), hip_version, state)
    note("this hipcc built code objects for: {}; could not target: {}".format(
        ", ".join(state["built"]) or "none", ", ".join(state["rejected"]) or "none"))
    print("{} failed".format(len(FAILED)) if FAILED else "all passed", "({:.0f} s)".format(time.monotonic() - started))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
