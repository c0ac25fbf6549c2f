"""Faster load_inline builds for kbrl_worker.py's compile stage, without changing what is built.

Almost all of a small extension's build is the compiler parsing torch's headers: the generated
binding file main.cpp starts with #include <torch/extension.h> (all of torch, pybind11 and
Python.h), and a CUDA source gets torch/types.h from load_inline and usually includes
torch/extension.h itself. Two accelerations, each switched on by the compile job:

pch            main.cpp is compiled against a precompiled torch/extension.h. One PCH per
               compiler and flag set is built once under <dir>/pch/<key>/torch/extension.h.gch and
               found through CPATH, which g++ searches before the -isystem torch directories.
               Next to it, torch/extension.h passes on to torch's own (#include_next): a repeated
               include, or a compile whose flags do not match the PCH, parses as usual.
light_headers  a CUDA source is first built with torch/extension.h, torch/torch.h, torch/all.h (and
               in the lightest tier torch/types.h) shadowed by smaller sets of torch's own headers,
               through NVCC_PREPEND_FLAGS=-isystem <dir>/light/<key>/<tier>. If that build or its
               import fails, the next tier is tried, then the original headers: the result of the
               last attempt is exactly the plain build's.

Neither changes a byte that load_inline writes into the build directory (sources, build.ninja):
the run stage's own load_inline call finds every object up to date and needs none of this. The
shadow headers are dependencies that ninja records, so <dir> must live as long as the builds.
Which acceleration did what is reported by metadata() and lands in the compile result.

Candidate code runs in this process, so everything here is plain: one wrapper around
torch.utils.cpp_extension.load_inline and one around _run_ninja_build (active only inside the
wrapper), the candidate's arguments passed through untouched, and locks that are never waited
on (a PCH being built by another compile is simply not used by this one).
"""

import contextlib
import fcntl
import functools
import hashlib
import inspect
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

FORMAT = 1  # bumped when the PCH recipe or the shadow headers change

# Tiers of shadow headers, lightest first. A tier replaces the headers named in SHADOWED[tier]
# with its prelude; everything in a prelude is one of torch's own headers (so a name that
# resolves, resolves to the declaration the full headers give it) apart from the torch
# namespace block, which is copied at run time from the installed torch/types.h.
TIERS = ("minimal", "types")
SHADOWED = {
    "minimal": ("torch/extension.h", "torch/torch.h", "torch/all.h", "torch/types.h"),
    "types": ("torch/extension.h", "torch/torch.h", "torch/all.h"),
}
# What CUDA sources use from torch: Tensor and its methods, TensorOptions, TORCH_CHECK, devices
# and guards, AT_DISPATCH_*, tensor operators, and the factory functions in both at:: and
# torch:: (variable_factories). AT_PER_OPERATOR_HEADERS makes those include one header per
# operator instead of all of ATen/Functions.h; a source that calls another operator as a free
# function (at::matmul) does not compile here and goes on to the next tier.
MINIMAL_HEADERS = (
    "ATen/core/Tensor.h",
    "ATen/Context.h",
    "ATen/Device.h",
    "ATen/DeviceGuard.h",
    "ATen/Dispatch.h",
    "ATen/TensorOperators.h",
    "ATen/ScalarOps.h",
    "c10/core/TensorOptions.h",
    "c10/util/Exception.h",
    "torch/csrc/autograd/generated/variable_factories.h",
    "torch/csrc/autograd/variable.h",
    "optional",
)


class FastBuild:
    def __init__(self, torch, settings, log_dir):
        import torch.utils.cpp_extension as cpp_extension

        self.ce = cpp_extension
        self.torch_version = torch.__version__
        self.include_dir = os.path.join(os.path.dirname(torch.__file__), "include")
        self.pch = bool(settings.get("pch"))
        # nvcc only: a ROCm torch builds CUDA sources with hipcc.
        self.light = bool(settings.get("light_headers")) and bool(torch.version.cuda) and not getattr(torch.version, "hip", None)
        self.root = settings.get("dir") or ""
        self.log_dir = log_dir
        self.events = {"pch": [], "light_headers": []}
        self.active = False
        self.last_build_dir = None
        self.missing_ops = frozenset()
        self.original_load_inline = cpp_extension.load_inline
        self.original_run_ninja = getattr(cpp_extension, "_run_ninja_build", None)
        if not self.root:
            self.pch = self.light = False

    def install(self):
        """Replaces load_inline (and ninja's runner) for this process; the candidate imports
        load_inline after this, from the module or by name, and gets the wrapper either way."""
        if not (self.pch or self.light):
            return
        original = self.original_load_inline

        @functools.wraps(original)
        def load_inline(*args, **kwargs):
            return self.load_inline(*args, **kwargs)

        self.ce.load_inline = load_inline
        if self.original_run_ninja is not None:
            run_original = self.original_run_ninja

            @functools.wraps(run_original)
            def run_ninja_build(build_directory, *args, **kwargs):
                if not self.active:
                    return run_original(build_directory, *args, **kwargs)
                return self.run_ninja_build(build_directory, *args, **kwargs)

            self.ce._run_ninja_build = run_ninja_build
        elif self.pch:
            self.note("pch", "unsupported")

    def metadata(self):
        """{"pch": ..., "light_headers": ...}: what happened, one entry per build of a
        load_inline call. pch: used, built (and used), deferred (the first build with these
        flags: none built yet), busy (another compile is building it), failed (g++ could not
        build it or will not use it), unsupported (not g++, no build.ninja to read).
        light_headers: minimal or types (the tier that built), fallback (torch's own headers)."""
        return {k: ",".join(v) for k, v in self.events.items() if v}

    def note(self, what, event):
        self.events[what].append(event)

    # ---- load_inline -----------------------------------------------------------------------

    def load_inline(self, *args, **kwargs):
        try:
            bound = inspect.signature(self.original_load_inline).bind(*args, **kwargs).arguments
        except TypeError:
            bound = None  # the plain call raises the same error
        if self.active or bound is None:
            return self.original_load_inline(*args, **kwargs)
        tiers = self.light_tiers() if self.light and bound.get("cuda_sources") else []
        # torch appends to list arguments in place; every attempt after the first gets fresh
        # copies of them as they were, so the candidate's lists end up as a plain call leaves them.
        saved_args = copies(args)
        saved_kwargs = dict(zip(kwargs, copies(kwargs.values())))

        def fresh():
            return copies(saved_args), dict(zip(saved_kwargs, copies(saved_kwargs.values())))

        if tiers and tiers[0][0] == "minimal" and clashes(bound.get("cuda_sources"), self.missing_ops):
            tiers = tiers[1:]
        name = bound.get("name")
        self.active = True
        try:
            first = True
            for tier, shadow_dir in tiers:
                call_args, call_kwargs = (args, kwargs) if first else fresh()
                first = False
                self.last_build_dir = None
                try:
                    with prepended_env("NVCC_PREPEND_FLAGS", "-isystem " + shlex.quote(shadow_dir)), \
                            redirected_output(os.path.join(self.log_dir, "light-headers.log")):
                        module = self.original_load_inline(*call_args, **call_kwargs)
                except Exception:
                    self.forget(name)
                    continue
                self.note("light_headers", tier)
                return module
            if tiers:
                self.note("light_headers", "fallback")
            call_args, call_kwargs = (args, kwargs) if first else fresh()
            return self.original_load_inline(*call_args, **call_kwargs)
        finally:
            self.active = False

    def forget(self, name):
        """After a failed attempt: the next one must build again under the same name. torch
        would otherwise call the extension name_v1 (its versioner saw these sources already),
        or find the light objects up to date when only their import failed."""
        versioner = getattr(self.ce, "JIT_EXTENSION_VERSIONER", None)
        entries = getattr(versioner, "entries", None)
        if isinstance(entries, dict):
            entries.pop(name, None)
        build_dir = self.last_build_dir
        if build_dir and os.path.isdir(build_dir):
            for f in os.listdir(build_dir):
                if f.endswith(".cuda.o") or f == "{}.so".format(name):
                    with contextlib.suppress(OSError):
                        os.remove(os.path.join(build_dir, f))

    def run_ninja_build(self, build_directory, *args, **kwargs):
        self.last_build_dir = build_directory
        pch_root = self.ensure_pch(build_directory) if self.pch else None
        with prepended_env("CPATH", pch_root, sep=":") if pch_root else contextlib.nullcontext():
            return self.original_run_ninja(build_directory, *args, **kwargs)

    # ---- precompiled torch/extension.h ------------------------------------------------------

    def ensure_pch(self, build_dir):
        """The directory to put on CPATH for this build, or None. Builds the PCH when this flag
        set has none yet and no other compile is building it."""
        ninja = read_ninja_variables(os.path.join(build_dir, "build.ninja"))
        main_cpp = os.path.join(build_dir, "main.cpp")
        if ninja is None or "cxx" not in ninja or "cflags" not in ninja or not os.path.exists(main_cpp):
            self.note("pch", "unsupported")
            return None
        try:
            cxx = shlex.split(ninja["cxx"])
            flags = [f for f in shlex.split(ninja["cflags"]) if not f.startswith("-DTORCH_EXTENSION_NAME=")]
            post = [f for f in shlex.split(ninja.get("post_cflags", "")) if not f.startswith("-DTORCH_EXTENSION_NAME=")]
        except ValueError:
            self.note("pch", "unsupported")
            return None
        compiler = compiler_identity(cxx)
        if compiler is None:
            self.note("pch", "unsupported")  # g++ only: clang finds no .gch through the include path
            return None
        key = sha256(json.dumps([FORMAT, compiler, flags, post, self.torch_version]))[:32]
        pch_dir = os.path.join(self.root, "pch")
        root = os.path.join(pch_dir, key)
        gch = os.path.join(root, "torch", "extension.h.gch")
        forward = os.path.join(root, "torch", "extension.h")

        def ready():
            return os.path.exists(gch) and os.path.exists(forward)

        if os.path.exists(os.path.join(build_dir, "main.o")):
            # Built by an earlier attempt of this call: nothing left that would use a PCH.
            return root if ready() else None
        if ready():
            self.note("pch", "used")
            return root
        if os.path.exists(os.path.join(pch_dir, key + ".failed")):
            self.note("pch", "failed")
            return None
        # A PCH costs about two plain parses to build: only for a flag set seen before.
        os.makedirs(os.path.join(root, "torch"), exist_ok=True)
        seen = os.path.join(pch_dir, key + ".seen")
        if not os.path.exists(seen):
            with open(seen, "w"):
                pass
            self.note("pch", "deferred")
            return None
        with open(os.path.join(pch_dir, key + ".lock"), "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                self.note("pch", "busy")  # another compile is building it: parse as usual
                return None
            if ready():
                self.note("pch", "used")
                return root
            for f in os.listdir(os.path.dirname(gch)):  # left by a build that was killed
                if f.startswith("extension.h.gch.tmp-"):
                    with contextlib.suppress(OSError):
                        os.remove(os.path.join(os.path.dirname(gch), f))
            stub = os.path.join(pch_dir, key + ".h")
            tmp = "{}.tmp-{}".format(gch, os.getpid())
            with open(stub, "w") as f:
                f.write("#include <torch/extension.h>\n")
            command = cxx + flags + ["-x", "c++-header", stub, "-o", tmp] + post
            proc = subprocess.run(command, cwd=build_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            with open(os.path.join(pch_dir, key + ".log"), "wb") as f:
                f.write((shlex.join(command) + "\n").encode() + proc.stdout)
            if proc.returncode != 0 or not os.path.exists(tmp):
                with contextlib.suppress(OSError):
                    os.remove(tmp)
                with open(os.path.join(pch_dir, key + ".failed"), "wb") as f:
                    f.write(proc.stdout[-4000:])
                self.note("pch", "failed")
                return None
            # g++ takes a directory holding extension.h.gch to hold extension.h too: a later
            # #include <torch/extension.h> (candidates repeat it), or one under flags that do not
            # match the PCH, opens this file, which passes on to torch's own.
            with open(forward + ".tmp", "w") as f:
                f.write("#pragma once\n#include_next <torch/extension.h>\n")
            os.rename(forward + ".tmp", forward)
            os.rename(tmp, gch)
            # g++ decides whether a PCH fits a compile (macros, dialect, target options): ask it
            # once, the way main.cpp will be compiled, so that "used" means used.
            probe = os.path.join(pch_dir, key + ".probe.cpp")
            with open(probe, "w") as f:
                f.write("#include <torch/extension.h>\n")
            command = cxx + flags + ["-DTORCH_EXTENSION_NAME=kbrl_pch_probe", "-Winvalid-pch", "-Werror=invalid-pch",
                                     "-fsyntax-only", probe] + post
            with prepended_env("CPATH", root, sep=":"):
                check = subprocess.run(command, cwd=build_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            if check.returncode != 0:
                with contextlib.suppress(OSError):
                    os.remove(gch)
                with open(os.path.join(pch_dir, key + ".failed"), "wb") as f:
                    f.write(check.stdout[-4000:])
                self.note("pch", "failed")
                return None
        self.note("pch", "built")
        return root

    # ---- shadow headers for CUDA sources ----------------------------------------------------

    def light_tiers(self):
        """[(tier, shadow include directory)], lightest first, written once per torch; sets
        self.missing_ops, the operators that the minimal tier does not declare."""
        preludes = {"types": "#include <torch/types.h>\n"}
        block = torch_namespace_block(os.path.join(self.include_dir, "torch", "csrc", "api", "include", "torch", "types.h"))
        if block is not None:
            preludes["minimal"] = (
                "#ifndef AT_PER_OPERATOR_HEADERS\n#define AT_PER_OPERATOR_HEADERS\n#endif\n"
                + "".join("#include <{}>\n".format(h) for h in MINIMAL_HEADERS)
                + block + "\n")
        key = sha256(json.dumps([FORMAT, self.torch_version, self.include_dir, preludes]))[:32]
        base = os.path.join(self.root, "light", key)
        if not os.path.isdir(base):
            tmp = "{}.tmp-{}".format(base, os.getpid())
            shutil.rmtree(tmp, ignore_errors=True)
            for tier, prelude in preludes.items():
                guard = "KBRL_LIGHT_{}_H".format(tier.upper())
                text = ("// kbrl light headers, tier {}: stands in for torch's own header of this name in\n"
                        "// a first build of a CUDA source (libkbrl/worker/kbrl_fast_build.py).\n"
                        "#ifndef {}\n#define {}\n{}#endif\n").format(tier, guard, guard, prelude)
                for header in SHADOWED[tier]:
                    path = os.path.join(tmp, tier, header)
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    with open(path, "w") as f:
                        f.write(text)
            if "minimal" in preludes:
                missing = operators_not_declared(os.path.join(tmp, "minimal"), self.include_dir)
                with open(os.path.join(tmp, "minimal-missing-ops.json"), "w") as f:
                    json.dump(sorted(missing) if missing is not None else None, f)
            try:
                os.rename(tmp, base)
            except OSError:  # another compile wrote the same files first
                shutil.rmtree(tmp, ignore_errors=True)
        try:
            with open(os.path.join(base, "minimal-missing-ops.json")) as f:
                missing = json.load(f)
        except (OSError, ValueError):
            missing = None
        self.missing_ops = frozenset(missing or ())
        # Without the list the minimal tier cannot be checked for clashes: not used.
        return [(t, os.path.join(base, t)) for t in TIERS if t in preludes and (t != "minimal" or missing is not None)]


# What an ATen operator's per-operator headers are called, apart from the one that declares
# its functions (ATen/ops/<name>.h).
OPS_HEADER_SUFFIXES = ("_ops", "_native", "_meta", "_dispatch")


def operators_not_declared(minimal_dir, include_dir):
    """The ATen operators whose functions (at::<name>) torch's full headers declare and the
    minimal tier's do not, from g++'s list of what the minimal prelude includes; None when g++
    cannot tell."""
    ops_dir = os.path.join(include_dir, "ATen", "ops")
    try:
        every = {f[:-2] for f in os.listdir(ops_dir) if f.endswith(".h")}
    except OSError:
        return None
    every = {n for n in every if not any(n.endswith(sfx) or (sfx == "_dispatch" and "_dispatch" in n)
                                         for sfx in OPS_HEADER_SUFFIXES)}
    includes = [include_dir, os.path.join(include_dir, "torch", "csrc", "api", "include")]
    command = ["c++", "-M", "-std=c++17", "-x", "c++", os.path.join(minimal_dir, "torch", "types.h")]
    command[1:1] = ["-isystem" + d for d in [minimal_dir] + includes]
    try:
        proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    declared = set(re.findall(r"/ATen/ops/(\w+)\.h\b", proc.stdout.decode("utf-8", "replace")))
    return every - declared


def clashes(cuda_sources, missing_ops):
    """Whether a CUDA source declares a function that an at:: operator missing from the minimal
    tier could compete with in overload resolution: one with a Tensor parameter, or a function
    template, named like the operator. Under the full headers argument-dependent lookup (or
    `using namespace at/torch`) puts both in one overload set, and the call may resolve
    differently, or be ambiguous, where the minimal tier sees only the candidate's own."""
    if not cuda_sources or not missing_ops:
        return False
    text = "\n".join(cuda_sources) if isinstance(cuda_sources, (list, tuple)) else str(cuda_sources)
    text = re.sub(r"//[^\n]*|/\*.*?\*/", " ", text, flags=re.S)
    for m in re.finditer(r"\b([A-Za-z_]\w*)\s*\(([^()]*)\)", text):
        if m.group(1) in missing_ops and "Tensor" in m.group(2):
            return True
    for m in re.finditer(r"\btemplate\s*<", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"<": 1, ">": -1}.get(text[i], 0)
            i += 1
        head = text[i:i + 400].split("(", 1)[0]
        words = re.findall(r"[A-Za-z_]\w*", head)
        if words and words[0] not in ("struct", "class", "union", "using") and words[-1] in missing_ops:
            return True
    return False


def copies(values):
    """The values with every list replaced by a shallow copy (torch mutates list arguments)."""
    return [list(v) if isinstance(v, list) else v for v in values]


def torch_namespace_block(types_h):
    """torch/types.h's `namespace torch { using namespace at; ... }` (the torch:: names of
    dtypes and of everything in at::), or None when its layout is not the one expected."""
    try:
        with open(types_h) as f:
            text = f.read()
    except OSError:
        return None
    m = re.search(r"^namespace torch \{\n.*?^\} // namespace torch$", text, re.S | re.M)
    if m is None or "using namespace at;" not in m.group(0) or "#include" in m.group(0):
        return None
    return m.group(0)


def read_ninja_variables(path):
    """Top-level `name = value` lines of a build.ninja, or None. Values that use ninja's own
    escapes or variables other than $$ are left out (not needed, not safely reproducible)."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    out = {}
    for line in lines:
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*) = (.*)$", line)
        if m is None:
            continue
        value = m.group(2).replace("$$", "\0")
        if "$" in value:
            continue
        out[m.group(1)] = value.replace("\0", "$")
    return out


_compilers = {}


def compiler_identity(cxx):
    """A string that changes when the compiler does (path, size, mtime, version), or None when
    it is not g++."""
    if not cxx:
        return None
    exe = shutil.which(cxx[0])
    if exe is None:
        return None
    exe = os.path.realpath(exe)
    cached = _compilers.get((exe, tuple(cxx)))
    if cached is not None:
        return cached or None
    try:
        proc = subprocess.run(cxx + ["-v"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
        version = proc.stdout.decode("utf-8", "replace")
        st = os.stat(exe)
    except (OSError, subprocess.SubprocessError):
        version, st = "", None
    if st is None or "gcc version" not in version or "clang" in version:
        _compilers[(exe, tuple(cxx))] = ""
        return None
    lines = [l for l in version.splitlines() if l.startswith("gcc version") or l.startswith("Target:")]
    identity = "{}|{}|{}|{}".format(exe, st.st_size, st.st_mtime_ns, "|".join(lines))
    _compilers[(exe, tuple(cxx))] = identity
    return identity


def sha256(text):
    return hashlib.sha256(text.encode()).hexdigest()


@contextlib.contextmanager
def prepended_env(name, value, sep=" "):
    old = os.environ.get(name)
    os.environ[name] = value if not old else value + sep + old
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


@contextlib.contextmanager
def redirected_output(path):
    """fds 1 and 2 (the child's log) go to `path` meanwhile: a failed light attempt's compiler
    errors must not be read as the candidate's when the plain build fails too."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])
