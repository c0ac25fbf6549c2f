"""Faster load_inline builds for kbrl_worker.py's compile stage, without changing what is built.

Almost all of a small extension's build is the compiler parsing torch's headers: the generated
binding file main.cpp starts with #include <torch/extension.h> (all of torch, pybind11 and
Python.h), or with the candidate's own includes of torch's headers (no_implicit_headers), and a
CUDA source gets torch/types.h from load_inline and usually includes torch/extension.h itself.
Two accelerations, each switched on by the compile job:

pch            main.cpp is compiled against a precompiled header of its leading #include <...>
               lines (leading_headers: up to the last of torch's headers, so
               #include <torch/extension.h> alone for load_inline's usual binding file). One PCH
               per compiler, flag set and list of headers is built once under
               <dir>/pch/<key>/<first header>.gch and found through CPATH, which g++ searches
               before the -isystem torch directories; g++ loads it at main.cpp's first #include,
               and the next lines include headers the PCH already holds (#pragma once): the same
               declarations in the same order as a plain parse. Next to it, <first header> passes
               on to torch's own (#include_next): a repeated include, or a compile whose flags do
               not match the PCH, parses as usual.
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
import tempfile
import threading
import time

FORMAT = 2  # bumped when the PCH recipe or the shadow headers change
MAX_PCH = 12  # precompiled binding headers kept in one cache (0.3-0.75 GB each); then no new ones
PCH_WAIT_S = 240  # how long a binding file built beside the passes waits for a PCH being built

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
        # settings: the compile job's fast_build, every field given (the worker protocol has no
        # defaults on this side).
        self.pch = settings["pch"]
        # nvcc only: a ROCm torch builds CUDA sources with hipcc.
        self.light = settings["light_headers"] and bool(torch.version.cuda) and not getattr(torch.version, "hip", None)
        self.parallel = self.light and settings["parallel_passes"]
        # The binding file's compile beside nvcc's front ends (sooner done), or after them (a
        # source that fails there then costs no binding compile): the evaluator says which, by
        # how many builds it has in flight.
        self.binding_early = settings["binding_early"]
        self.root = settings["dir"]
        self.log_dir = log_dir
        self.events = {"pch": [], "light_headers": [], "parallel_passes": [], "cuda_pch": [], "light_binding": [],
                       "light_skipped": [], "binding": []}
        self.active = False
        self.in_tier = None  # (tier, shadow directory) while a light tier's attempt is building
        self.cpp_sources = None  # the load_inline call's, for the binding file's clash check
        self.binding_light_built = False  # this attempt's binding file was built with light headers
        self.pass_failure = None  # the compiler's output where this attempt's passes failed
        self.last_build_dir = None
        self.missing_ops = frozenset()
        self.light_base = None  # <dir>/light/<key>, where light_tiers wrote the shadow headers
        self.beyond_minimal = None  # names_beyond_minimal's set, once read
        self.original_load_inline = cpp_extension.load_inline
        self.original_run_ninja = getattr(cpp_extension, "_run_ninja_build", None)
        if not self.root:
            self.pch = self.light = self.parallel = False

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
        flags and headers: none built yet), busy (another compile is building it), waited (for
        another compile that was building it, then used), failed (g++ could not build it or will
        not use it), none (the binding file does not start with an include of torch's headers:
        nothing to precompile), full (MAX_PCH headers are precompiled already: parsed as usual),
        unsupported (not g++, no build.ninja to read).
        light_headers: minimal or types (the tier that built), fallback (torch's own headers).
        light_skipped: types, where the minimal tier's compile errors were none that a fuller tier
        could mend (see may_lack_declarations). binding: after_front_ends, where the binding
        file's compile beside nvcc's passes waited for their front ends (binding_early off)."""
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
        self.cpp_sources = bound.get("cpp_sources")
        self.active = True
        try:
            first = True
            for tier, shadow_dir in tiers:
                call_args, call_kwargs = (args, kwargs) if first else fresh()
                first = False
                self.last_build_dir = None
                self.binding_light_built = False
                self.pass_failure = None
                self.in_tier = (tier, shadow_dir)
                try:
                    with prepended_env("NVCC_PREPEND_FLAGS", "-isystem " + shlex.quote(shadow_dir)), \
                            redirected_output(os.path.join(self.log_dir, "light-headers.log")):
                        module = self.original_load_inline(*call_args, **call_kwargs)
                except Exception:
                    self.forget(name)
                    if tier == "minimal" and self.pass_failure is not None \
                            and not may_lack_declarations(self.pass_failure, self.names_beyond_minimal):
                        # An error of the source itself: the types tier would fail the same way,
                        # and only the full headers' build gives the plain build's message.
                        self.note("light_skipped", "types")
                        break
                    continue
                finally:
                    self.in_tier = None
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
        # A binding file built with the light headers goes too: the next attempt's are others.
        light_main = self.binding_light_built
        if build_dir and os.path.isdir(build_dir):
            for f in os.listdir(build_dir):
                if f.endswith(".cuda.o") or f == "{}.so".format(name) or (light_main and f == "main.o"):
                    with contextlib.suppress(OSError):
                        os.remove(os.path.join(build_dir, f))

    def run_ninja_build(self, build_directory, *args, **kwargs):
        self.last_build_dir = build_directory
        if not (self.parallel and self.in_tier):
            pch_root = self.ensure_pch(build_directory) if self.pch else None
            with prepended_env("CPATH", pch_root, sep=":") if pch_root else contextlib.nullcontext():
                return self.original_run_ninja(build_directory, *args, **kwargs)
        built = self.build_cuda_passes(build_directory)
        # The binding file, when the light one did not build beside the passes, gets the full PCH.
        pch_root = None
        if self.pch and not os.path.exists(os.path.join(build_directory, "main.o")):
            pch_root = self.ensure_pch(build_directory)
        # ninja runs every command as usual, nvcc only listing its steps for the objects built
        # above: the build log and the dependencies it records are a plain build's.
        with prepended_env("CPATH", pch_root, sep=":") if pch_root else contextlib.nullcontext(), \
                prepended_env("NVCC_PREPEND_FLAGS", "--dryrun") if built else contextlib.nullcontext():
            return self.original_run_ninja(build_directory, *args, **kwargs)

    # ---- precompiled binding-file headers ---------------------------------------------------

    def ensure_pch(self, build_dir, binding=None, cancel=None):
        """The directories to put on CPATH for the binding file's compile (":"-joined), or None.
        Builds the PCH when this flag set and list of leading headers has none yet and no other
        compile is building it.
        binding: (tier, shadow directory) for the light binding file (light_binding_header):
        its header stands in for torch/extension.h, the tier's shadow headers behind it, and the
        result is on CPATH whether or not its PCH is ready yet. cancel: a threading.Event, for a
        compile off the critical path (beside nvcc's passes): while another compile builds the
        PCH, this one waits for it (up to PCH_WAIT_S, or until cancel is set) instead of parsing
        the headers itself, as a burst of first builds would all do."""
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
        header = None
        if binding is not None:
            header = self.light_binding_header()
            if header is None:
                return None
            headers = ["torch/extension.h"]
        else:
            headers = self.leading_headers(main_cpp)
            if not headers:
                self.note("pch", "none")
                return None
        key = sha256(json.dumps([FORMAT, compiler, flags, post, self.torch_version]
                                + ([binding[0], binding[1], header] if binding else [headers])))[:32]
        pch_dir = os.path.join(self.root, "pch")
        root = os.path.join(pch_dir, key)
        gch = os.path.join(root, headers[0] + ".gch")
        forward = os.path.join(root, headers[0])
        includes = "".join("#include <{}>\n".format(h) for h in headers)
        cpath = root + (":" + binding[1] if binding else "")
        if binding and not os.path.exists(forward):
            os.makedirs(os.path.dirname(forward), exist_ok=True)
            tmp = temporary_name(forward)
            with open(tmp, "w") as f:
                f.write(header)
            os.rename(tmp, forward)
        found = cpath if binding else None  # the light header parses without its PCH too
        if binding and not self.pch:
            return found

        def ready():
            return os.path.exists(gch) and os.path.exists(forward)

        if os.path.exists(os.path.join(build_dir, "main.o")):
            # Built by an earlier attempt of this call: nothing left that would use a PCH.
            return cpath if ready() else found
        if ready():
            self.note("pch", "used")
            return cpath
        if os.path.exists(os.path.join(pch_dir, key + ".failed")):
            self.note("pch", "failed")
            return found
        # A PCH costs more than a plain parse to build: only for a flag set and headers seen
        # before, and not past MAX_PCH of them (ninja records the PCH as a dependency of the
        # builds that used it, so none is ever removed).
        os.makedirs(pch_dir, exist_ok=True)
        seen = os.path.join(pch_dir, key + ".seen")
        if not os.path.exists(seen):
            with open(seen, "w"):
                pass
            self.note("pch", "deferred")
            return found
        if not os.path.isdir(root):
            with contextlib.suppress(OSError):
                if sum(1 for d in os.scandir(pch_dir) if d.is_dir()) >= MAX_PCH:
                    self.note("pch", "full")
                    return found
        os.makedirs(os.path.dirname(gch), exist_ok=True)
        with open(os.path.join(pch_dir, key + ".lock"), "a") as lock:
            waited = False
            if not try_lock(lock):
                waited = cancel is not None and wait_for_lock(lock, cancel)
                if not waited:
                    self.note("pch", "busy")  # another compile is building it: parse as usual
                    return found
            if ready():
                self.note("pch", "waited" if waited else "used")
                return cpath
            if os.path.exists(os.path.join(pch_dir, key + ".failed")):
                self.note("pch", "failed")
                return found
            for f in os.listdir(os.path.dirname(gch)):  # left by a build that was killed
                if f.startswith(os.path.basename(gch) + ".tmp-"):
                    with contextlib.suppress(OSError):
                        os.remove(os.path.join(os.path.dirname(gch), f))
            stub = os.path.join(pch_dir, key + ".h")
            tmp = temporary_name(gch)
            with open(stub, "w") as f:
                f.write(includes)
            command = cxx + flags + ["-x", "c++-header", stub if binding is None else forward, "-o", tmp] + post
            proc = subprocess.run(command, cwd=build_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  env=env_prepended("CPATH", binding[1], ":") if binding else None)
            with open(os.path.join(pch_dir, key + ".log"), "wb") as f:
                f.write((shlex.join(command) + "\n").encode() + proc.stdout)
            if proc.returncode != 0 or not os.path.exists(tmp):
                with contextlib.suppress(OSError):
                    os.remove(tmp)
                with open(os.path.join(pch_dir, key + ".failed"), "wb") as f:
                    f.write(proc.stdout[-4000:])
                self.note("pch", "failed")
                return found
            if binding is None:
                # g++ takes a directory holding extension.h.gch to hold extension.h too: a later
                # #include <torch/extension.h> (candidates repeat it), or one under flags that do
                # not match the PCH, opens this file, which passes on to torch's own.
                tmp_forward = temporary_name(forward)
                with open(tmp_forward, "w") as f:
                    f.write("#pragma once\n#include_next <{}>\n".format(headers[0]))
                os.rename(tmp_forward, forward)
            os.rename(tmp, gch)
            # g++ decides whether a PCH fits a compile (macros, dialect, target options): ask it
            # once, the way main.cpp will be compiled, so that "used" means used.
            probe = os.path.join(pch_dir, key + ".probe.cpp")
            with open(probe, "w") as f:
                f.write(includes)
            command = cxx + flags + ["-DTORCH_EXTENSION_NAME=kbrl_pch_probe", "-Winvalid-pch", "-Werror=invalid-pch",
                                     "-fsyntax-only", probe] + post
            check = subprocess.run(command, cwd=build_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   env=env_prepended("CPATH", cpath, ":"))
            if check.returncode != 0:
                with contextlib.suppress(OSError):
                    os.remove(gch)
                with open(os.path.join(pch_dir, key + ".failed"), "wb") as f:
                    f.write(check.stdout[-4000:])
                self.note("pch", "failed")
                return found
        self.note("pch", "built")
        return cpath

    def leading_headers(self, main_cpp):
        """The headers of the binding file's leading #include <...> lines that a PCH may hold, in
        order, or []: after blank and // comment lines only, each named once, cut after the last
        of torch's headers (standard headers after them parse quickly anyway, and a shorter list
        serves more sources). The first must be one of torch's, guarded by #pragma once: its
        PCH stands in for it, and its forwarding header (#pragma once too) for any later
        include of it. Anything else (a macro, code, a quoted include, a comment that goes on
        to the next line) ends the list: g++ uses a PCH only before the first token, and what
        follows is parsed as usual, after the headers the PCH holds."""
        try:
            with open(main_cpp, encoding="utf-8") as f:
                text = f.read(1 << 16)
        except (OSError, UnicodeError):
            return []
        headers = []
        for line in text.splitlines():
            stripped = line.strip()
            if stripped.endswith("\\"):
                break
            if not stripped or stripped.startswith("//"):
                continue
            m = re.fullmatch(r"#\s*include\s*<([A-Za-z0-9_./+-]+)>", stripped)
            if m is None or m.group(1) in headers or ".." in m.group(1).split("/"):
                break
            headers.append(m.group(1))
        while headers and self.torch_header(headers[-1]) is None:
            headers.pop()
        first = self.torch_header(headers[0]) if headers else None
        try:
            with open(first, encoding="utf-8", errors="replace") as f:
                guarded = re.search(r"^\s*#\s*pragma\s+once\b", f.read(1 << 14), re.M) is not None
        except (OSError, TypeError):
            guarded = False
        return headers if guarded else []

    def torch_header(self, name):
        """The path of torch's header of this #include <name>, or None: the include directories
        of load_inline's own compile flags, in their order."""
        for d in (self.include_dir, os.path.join(self.include_dir, "torch", "csrc", "api", "include")):
            path = os.path.join(d, name)
            if os.path.isfile(path):
                return path
        return None

    def light_binding_header(self):
        """The light binding file's torch/extension.h, or None where torch's headers are not laid
        out as expected. torch/extension.h is torch/all.h (the C++ frontend: modules, optimizers,
        data loaders; no Python) and torch/python.h; the light one keeps what torch/python.h
        includes apart from the C++ frontend's headers, so every pybind11 type caster torch
        declares is there, and a binding file that uses anything of the frontend does not compile
        with it (and is built again with the full header). Defines under which torch/extension.h
        behaves otherwise pass on to it."""
        try:
            with open(os.path.join(self.include_dir, "torch", "csrc", "api", "include", "torch", "python.h")) as f:
                text = f.read()
        except OSError:
            return None
        includes = re.findall(r"^#include <([^>]+)>", text, re.M)
        kept = [h for h in includes if not h.startswith("torch/") or h.startswith("torch/csrc/") or h == "torch/types.h"]
        if "torch/types.h" not in kept or not any(h.startswith("torch/csrc/utils/pybind") for h in kept):
            return None
        return (
            "// kbrl light headers: stands in for torch/extension.h in the binding file of a build\n"
            "// whose CUDA source builds with light headers (libkbrl/worker/kbrl_fast_build.py).\n"
            "#if defined(TORCH_STABLE_ONLY) || defined(TORCH_TARGET_VERSION) || defined(TORCH_INDUCTOR_CPP_WRAPPER)\n"
            "#include_next <torch/extension.h>\n"
            "#elif !defined(KBRL_LIGHT_BINDING_H)\n#define KBRL_LIGHT_BINDING_H\n"
            + "".join("#include <{}>\n".format(h) for h in kept) + "#endif\n")

    # ---- nvcc's two front ends side by side ------------------------------------------------

    def build_cuda_passes(self, build_dir):
        """Builds the CUDA objects of this build with nvcc's own steps (from `nvcc --dryrun`),
        the host pass (preprocess, cudafe++) beside the device pass (preprocess, cicc, ptxas,
        fatbinary), then the host object; meanwhile ninja builds the other objects. nvcc runs
        the two passes one after the other because cicc reads the module id that cudafe++
        writes when it finishes; here the id is written first and given to both. Returns
        whether the CUDA objects were built this way (then with the dependency files ninja
        expects); False when this build is not the expected kind (ninja builds it as usual):
        other nvcc rules (device links), objects left from an earlier build, steps other than
        the known ones. Raises when a step fails, as ninja would."""
        try:
            edges = ninja_edges(build_dir)
        except (OSError, subprocess.SubprocessError, ValueError):
            edges = []
        rules = {rule for _, rule, _ in edges}
        cuda = [(out, command) for out, rule, command in edges if rule == "cuda_compile"]
        if not cuda or not rules <= {"compile", "cuda_compile", "link", "phony"} \
                or any(os.path.exists(os.path.join(build_dir, out)) for out, _ in cuda):
            self.note("parallel_passes", "unsupported")
            return False
        plans = []
        for out, command in cuda:
            plan = nvcc_plan(command, build_dir, out)
            if plan is None:
                self.note("parallel_passes", "unsupported")
                for p in plans:
                    p.cleanup()
                return False
            if self.pch:
                plan.prefix_pch = PrefixPch(self.root, functools.partial(self.note, "cuda_pch"))
            plans.append(plan)
        others = [out for out, rule, _ in edges if rule == "compile"]
        # The binding file meanwhile, with this tier's light headers where it can. A failure there
        # leaves it to the ninja run afterwards, with the full headers, to build or report. Unless
        # it may start at once, it starts when the first CUDA object's front ends have passed.
        gate = threading.Event()
        if self.binding_early:
            gate.set()
        elif others:
            self.note("binding", "after_front_ends")
        side = SideBuild(self, build_dir, others, gate) if others else None
        passes_ok = False
        try:
            for plan in plans:
                plan.run(front_ends_passed=gate.set)
            passes_ok = True
        except Exception as e:
            self.note("parallel_passes", "failed")
            self.pass_failure = getattr(e, "output", None)
            raise
        finally:
            if side is not None:
                side.finish(stop=not passes_ok)
            for plan in plans:
                plan.cleanup()
        self.note("parallel_passes", "used")
        return True

    def light_binding_cpath(self, build_dir, cancel=None):
        """CPATH for compiling the binding file against the minimal tier's light headers (and
        their PCH, when ready), or None. The binding file is the candidate's cpp_sources (most
        often declarations) and the pybind11 module: light_binding_header keeps every Python
        binding header of torch, and the tier's shadow headers stand behind it. The types tier
        saves less there, and a binding object built with the full headers serves every later
        attempt of the call, so from that tier on it is built once, with the full PCH."""
        tier, shadow_dir = self.in_tier
        if tier != "minimal" or clashes(self.cpp_sources, self.missing_ops):
            return None
        return self.ensure_pch(build_dir, binding=(tier, shadow_dir), cancel=cancel)

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
            tmp = temporary_name(base)
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
        self.light_base = base
        # Without the list the minimal tier cannot be checked for clashes: not used.
        return [(t, os.path.join(base, t)) for t in TIERS if t in preludes and (t != "minimal" or missing is not None)]

    def names_beyond_minimal(self):
        """Every identifier in the headers that torch/extension.h includes and the minimal tier
        does not (under nvcc's host and device macros too): the names a fuller tier could declare,
        or declare more of. Worked out once per torch, on first use; None when the compiler cannot
        tell (or another compile is working it out)."""
        if self.beyond_minimal is not None or self.light_base is None:
            return self.beyond_minimal
        path = os.path.join(self.light_base, "beyond-minimal-names.txt")
        if os.path.exists(path + ".failed"):
            return None
        if not os.path.exists(path):
            with open(path + ".lock", "a") as lock:
                if not try_lock(lock):
                    return None
                if not os.path.exists(path):
                    names = header_names_beyond(os.path.join(self.light_base, "minimal"), self.include_dir,
                                                cuda_include_dirs(self.ce))
                    if names is None:
                        open(path + ".failed", "w").close()
                        return None
                    tmp = temporary_name(path)
                    with open(tmp, "w") as f:
                        f.write("\n".join(sorted(names)) + "\n")
                    os.rename(tmp, path)
        with open(path) as f:
            self.beyond_minimal = frozenset(f.read().split())
        return self.beyond_minimal


def cuda_include_dirs(cpp_extension):
    home = getattr(cpp_extension, "CUDA_HOME", None)
    return [d for d in (os.path.join(home, "include"), os.path.join(home, "targets", "x86_64-linux", "include"))
            if os.path.isdir(d)] if home else []


def header_names_beyond(minimal_dir, include_dir, cuda_dirs):
    """The identifiers of the headers that torch/extension.h includes and the minimal tier's
    torch/types.h does not, under the host compiler's macros and nvcc's of both passes; None
    when g++ cannot list them."""
    import sysconfig

    includes = [include_dir, os.path.join(include_dir, "torch", "csrc", "api", "include"),
                sysconfig.get_paths().get("include", "")] + cuda_dirs
    variants = ([], ["-D__CUDACC__", "-D__NVCC__"], ["-D__CUDACC__", "-D__NVCC__", "-D__CUDA_ARCH__=900"])

    def closure(entry, first):
        files = set()
        for macros in variants:
            found = included_headers(entry, first + includes, macros, missing_ok=True)
            if found is None:
                return None
            files |= found
        return files

    full = closure(os.path.join(include_dir, "torch", "extension.h"), [])
    minimal = closure(os.path.join(minimal_dir, "torch", "types.h"), [minimal_dir])
    if full is None or minimal is None:
        return None
    names = set()
    for path in full - minimal:
        with contextlib.suppress(OSError):
            with open(path, errors="replace") as f:
                names.update(re.findall(r"[A-Za-z_]\w*", f.read()))
    return names


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
    files = included_headers(os.path.join(minimal_dir, "torch", "types.h"),
                             [minimal_dir, include_dir, os.path.join(include_dir, "torch", "csrc", "api", "include")])
    if files is None:
        return None
    declared = {m.group(1) for m in (re.search(r"/ATen/ops/(\w+)\.h$", f) for f in files) if m}
    return every - declared


def included_headers(entry, include_dirs, macros=(), missing_ok=False):
    """The files a C++ compile of `entry` reads (g++ -M, the include dirs as -isystem, in order),
    as the dependency list writes them; None when g++ fails. missing_ok: a header that is not
    found is listed by name instead of failing (-MG)."""
    command = ["c++", "-M"] + (["-MG"] if missing_ok else []) + ["-std=c++17"] + list(macros) \
        + ["-isystem" + d for d in include_dirs if d] + ["-x", "c++", entry]
    try:
        proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=300)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    return set(depfile_inputs(proc.stdout.decode("utf-8", "replace")))


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


def ninja_edges(build_dir):
    """[(output, rule, command)] of a build.ninja's build edges, from ninja itself (command: the
    one that builds the output, None for rules without one, such as phony)."""
    def ninja(*args):
        return subprocess.run(["ninja", "-C", build_dir] + list(args), stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, check=True, timeout=60).stdout.decode()
    edges = []
    for line in ninja("-t", "targets", "all").splitlines():
        out, _, rule = line.rpartition(": ")
        command = None
        if rule == "cuda_compile":
            commands = ninja("-t", "commands", "-s", out).splitlines()
            if len(commands) != 1:
                raise ValueError("one command expected for " + out)
            command = commands[0]
        edges.append((out, rule, command))
    return edges


class SideBuild:
    """The binding file's compile (`ninja -j 1 <objects>`) beside nvcc's passes, started from a
    thread once `gate` is set: it may wait for a PCH that another compile is building
    (ensure_pch's cancel)."""

    def __init__(self, fast, build_dir, objects, gate):
        self.fast, self.build_dir, self.objects = fast, build_dir, objects
        self.gate = gate
        self.tier = fast.in_tier[0] if fast.in_tier else None
        self.cancel = threading.Event()
        self.proc = None
        self.light = False  # compiled with the light binding header
        self.thread = threading.Thread(target=self.start, daemon=True)
        self.thread.start()

    def start(self):
        fast = self.fast
        cpath = None
        try:
            cpath = fast.light_binding_cpath(self.build_dir, self.cancel)
            self.light = cpath is not None
            if cpath is None and fast.pch:
                cpath = fast.ensure_pch(self.build_dir, cancel=self.cancel)
        except Exception:  # the ninja run afterwards builds what is missing, as usual
            self.light, cpath = False, None
        self.gate.wait()  # finish opens it, whether the passes passed or failed
        if not self.cancel.is_set():
            self.proc = subprocess.Popen(["ninja", "-j", "1"] + self.objects, cwd=self.build_dir,
                                         env=env_prepended("CPATH", cpath, ":") if cpath else None,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def finish(self, stop):
        """Waits for the compile; stop (the passes failed): a light binding compile is of no use
        (the next attempt builds one with the full headers), so it is stopped, or not started.
        ninja passes the signal on to its compiler; what it leaves behind goes with the attempt."""
        fast = self.fast
        if stop:
            self.cancel.set()
        self.gate.set()  # the passes are done: nothing left to wait for
        self.thread.join()
        proc = self.proc
        if proc is None:  # cancelled while it waited for a PCH
            if self.light:
                fast.note("light_binding", "stopped")
            return
        if stop and self.light and proc.poll() is None:
            proc.terminate()
            proc.wait()
            for out in self.objects:
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(self.build_dir, out))
            fast.note("light_binding", "stopped")
            return
        ok = proc.wait() == 0
        if self.light:
            fast.note("light_binding", self.tier if ok else "fallback")
            fast.binding_light_built = ok


def temporary_name(path):
    """A name beside `path` to write into and then rename onto it. Process ids do not tell the
    writers apart: each sandboxed worker has a PID namespace of its own, where they start again
    from 1, so the name carries random bits as well."""
    return "{}.tmp-{}-{}".format(path, os.getpid(), os.urandom(6).hex())


def try_lock(lock):
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False


def wait_for_lock(lock, cancel, limit=None):
    """Takes the lock once its holder lets go; False when `cancel` is set or the wait passes
    `limit` seconds (PCH_WAIT_S) first."""
    deadline = time.monotonic() + (PCH_WAIT_S if limit is None else limit)
    while not cancel.wait(0.2):
        if try_lock(lock):
            return True
        if time.monotonic() > deadline:
            return False
    return False


class PassFailed(RuntimeError):
    """A step of nvcc's passes failed; output: what the failed pass's compilers printed."""

    def __init__(self, message, output):
        super().__init__(message)
        self.output = output


# Compile errors (EDG's wording in cudafe++ and cicc, GCC's in the host compile) that a
# declaration missing from a light tier can cause: a name not found, a type left incomplete, an
# overload or a template not seen, or one that would have been preferred.
DECLARATION_ERRORS = re.compile("|".join((
    r"is undefined", r"has no member", r"incomplete", r"is not a template", r"no instance of",
    r"no operator", r"more than one", r"ambiguous", r"explicit type is missing", r"is not a type name",
    r"class or namespace name", r"expected a type specifier", r"not declared", r"is not a member",
    r"does not name", r"no matching", r"no match for", r"has not been declared", r"not a namespace",
    r"not a template", r"undeclared", r"unknown type",
)))
# Those of them that name what was not found, or had no fitting overload: a fuller tier can help
# only if its headers mention that name at all.
NAMED_ERRORS = (
    re.compile(r'identifier "([^"]+)" is undefined'),
    re.compile(r'has no member(?: [a-z ]+)? "([^"]+)"'),
    re.compile(r'no instance of (?:overloaded function|function template) "([^"]+)"'),
    re.compile(r"[\u2018'`]([^\u2019']+)[\u2019'] (?:was not declared|is not a member of|does not name a|has not been declared)"),
)


def may_lack_declarations(output, names_beyond=None):
    """Whether a light tier's compile errors (a failed pass's output) may come from what the tier
    leaves out, so that a fuller tier might compile the source: true unless there are errors and
    none of them is of a kind a missing declaration can cause (too many arguments, a type
    mismatch, a syntax error...) or names something that no header beyond the tier mentions
    (names_beyond: a function returning those headers' identifiers, or None). Only a guess at
    which attempt to make next: the full headers' build has the last word either way."""
    errors = [m.group(1) for m in re.finditer(r"(?:^|[:)] )(?:fatal )?error(?: #[\w-]+)?: ?(.*)$", output, re.M)]
    if not errors:
        return True
    for error in errors:
        named = next((m.group(1) for m in (r.search(error) for r in NAMED_ERRORS) if m), None)
        if named is not None:
            name = re.sub(r"<.*", "", named).split("::")[-1].strip()
            known = names_beyond() if names_beyond is not None else None
            if known is None or name in known:
                return True
        elif DECLARATION_ERRORS.search(error):
            return True
    return False


class NvccPlan:
    """One CUDA object built from nvcc's steps (argument lists): `host` (preprocess, cudafe++)
    and `device` (preprocess, cicc, ptxas per architecture, fatbinary) side by side, then
    `final` (the host compiler on cudafe++'s output, which includes the fatbinary). Steps run as
    direct children, in this process group, so a stage timeout that kills the group kills them.
    Dependencies are what the two preprocessors list (-MD), the set nvcc's own -MD gives. With
    a `prefix_pch`, the final compile reads the headers part of cudafe++'s output from a PCH."""

    def __init__(self, build_dir, out, env, host, device, final, keep_dir, depfiles):
        self.build_dir, self.out, self.env, self.keep_dir = build_dir, out, env, keep_dir
        self.host, self.device, self.final, self.depfiles = host, device, final, depfiles
        self.prefix_pch = None  # a PrefixPch, set by the caller

    def run(self, front_ends_passed=None):
        """Raises PassFailed when a step fails; calls front_ends_passed() once the host and device
        passes have succeeded, before the final host compile."""
        logs = {name: os.path.join(self.keep_dir, name + ".log") for name in ("host", "device", "final")}
        lock = threading.Lock()
        state = {"failed": None, "current": {}}

        def run_pass(name, steps):
            with open(logs[name], "wb") as log:
                for argv in steps:
                    with lock:
                        if state["failed"] is not None:
                            return
                        proc = subprocess.Popen(argv, cwd=self.build_dir, env=self.env, stdout=log,
                                                stderr=subprocess.STDOUT)
                        state["current"][name] = proc
                    if proc.wait() != 0:
                        with lock:
                            if state["failed"] is None:
                                state["failed"] = name
                            for other in state["current"].values():  # of no use once one failed
                                if other.poll() is None:
                                    other.kill()
                        return

        side = threading.Thread(target=run_pass, args=("device", self.device))
        side.start()
        run_pass("host", self.host)
        side.join()
        failed = state["failed"]
        if failed is None:
            if front_ends_passed is not None:
                front_ends_passed()
            restore = self.prefix_pch.prepare(self) if self.prefix_pch is not None else None
            run_pass("final", self.final)
            if state["failed"] is not None and restore is not None:
                restore()  # the file as cudafe++ wrote it: a plain compile has the last word
                state["failed"] = None
                run_pass("final", self.final)
            failed = state["failed"]
        if failed is not None:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(self.build_dir, self.out))
            with open(logs[failed], "rb") as f:
                text = f.read().decode("utf-8", "replace")
            raise PassFailed("Error building extension: the {} pass of {} failed:\n{}".format(failed, self.out, text), text)
        deps, seen = [], set()
        for path in self.depfiles:
            with open(path) as f:
                for token in depfile_inputs(f.read()):
                    if token not in seen:
                        seen.add(token)
                        deps.append(token)
        with open(os.path.join(self.build_dir, self.out + ".d"), "w") as f:
            f.write(self.out.replace(" ", "\\ ") + ": " + " \\\n  ".join(deps) + "\n")

    def cleanup(self):
        shutil.rmtree(self.keep_dir, ignore_errors=True)


class PrefixPch:
    """Precompiled headers for the host compiler's pass over cudafe++'s output. That output is
    one file: the source's leading #includes, expanded (most of the compile), then the source's
    own code. The expanded part, up to the first line of the source's own, is the same text for
    every source that starts with the same includes under the same flags: it is compiled once
    into a PCH under <dir>/<key>/ (key: the text and the compile command), and later compiles
    read `#include "<dir>/<key>/prefix.h"` followed by the rest of the file, under the same
    file name, which gives the same object. As with the binding file's PCH, the first compile
    of a prefix is plain and marks it seen, the second builds the PCH. At most KEEP are kept
    (the least recently used go; about 0.3 GB each)."""

    KEEP = 8
    MIN_PREFIX = 1 << 20  # smaller prefixes parse quickly anyway

    def __init__(self, root, note):
        self.dir = os.path.join(root, "cuda-pch")
        self.note = note

    def prepare(self, plan):
        """Rewrites the final compile's source to use the prefix's PCH when there is one; returns
        a function restoring the original source, or None when the source was left alone."""
        argv = plan.final[-1]
        try:
            source = next(a for a in argv if a.endswith(".cudafe1.cpp"))
            out = argv[argv.index("-o") + 1]
        except (ValueError, StopIteration, IndexError):
            self.note("unsupported")
            return None
        path = source if os.path.isabs(source) else os.path.join(plan.build_dir, source)
        with open(path, "rb") as f:
            text = f.read()
        newline = text.find(b"\n")
        first = re.match(rb'# 1 ("[^"\n]*")$', text[:newline]) if newline > 0 else None
        cut = None
        if first is not None:
            cut = re.compile(rb"^# \d+ " + re.escape(first.group(1)) + rb"( \d+)*$", re.M).search(text, newline + 1)
        if cut is None or cut.start() - newline < self.MIN_PREFIX:
            self.note("unsupported")
            return None
        prefix = text[newline + 1:cut.start()]
        template = ["<source>" if a == source else "<object>" if a == out else a for a in argv]
        key = sha256(json.dumps([FORMAT, template]) + hashlib.sha256(prefix).hexdigest())[:32]
        root = os.path.join(self.dir, key)
        header, gch = os.path.join(root, "prefix.h"), os.path.join(root, "prefix.h.gch")
        if not os.path.exists(gch) and not self.build(key, root, header, gch, prefix, argv, source, plan):
            return None
        with contextlib.suppress(OSError):
            os.utime(root)  # recently used
        with open(path, "wb") as f:
            f.write(b'#include "' + header.encode() + b'"\n' + text[cut.start():])

        def restore():
            with open(path, "wb") as f:
                f.write(text)
        self.note("used")
        return restore

    def build(self, key, root, header, gch, prefix, argv, source, plan):
        os.makedirs(self.dir, exist_ok=True)
        if os.path.exists(os.path.join(self.dir, key + ".failed")):
            self.note("failed")
            return False
        seen = os.path.join(self.dir, key + ".seen")
        if not os.path.exists(seen):
            with open(seen, "w"):
                pass
            self.note("deferred")
            return False
        with open(os.path.join(self.dir, key + ".lock"), "a") as lock:
            if not try_lock(lock):
                self.note("busy")  # another compile is building it
                return False
            if os.path.exists(gch):
                return True
            os.makedirs(root, exist_ok=True)
            tmp_header = temporary_name(header)
            with open(tmp_header, "wb") as f:
                f.write(prefix)
            os.rename(tmp_header, header)
            tmp = temporary_name(gch)
            i = argv.index(source)
            command = argv[:i] + ["-x", "c++-header", header] + argv[i + 1:]
            command[command.index("-o") + 1] = tmp
            proc = subprocess.run(command, cwd=plan.build_dir, env=plan.env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT)
            if proc.returncode != 0 or not os.path.exists(tmp):
                with contextlib.suppress(OSError):
                    os.remove(tmp)
                with open(os.path.join(self.dir, key + ".failed"), "wb") as f:
                    f.write((shlex.join(command) + "\n").encode() + proc.stdout[-4000:])
                self.note("failed")
                return False
            os.rename(tmp, gch)
        self.note("built")
        self.evict(keep=root)
        return True

    def evict(self, keep):
        try:
            entries = [os.path.join(self.dir, d) for d in os.listdir(self.dir)]
            entries = sorted((os.stat(d).st_mtime, d) for d in entries if os.path.isdir(d) and d != keep)
        except OSError:
            return
        for _, d in entries[:max(0, len(entries) + 1 - self.KEEP)]:
            shutil.rmtree(d, ignore_errors=True)  # compiles reading its PCH keep their open copy


def depfile_inputs(text):
    """The inputs of a make-style dependency file with one target, escaped as written."""
    text = text.replace("\\\n", " ")
    tokens = re.findall(r"(?:\\.|[^\s\\])+", text)
    for i, token in enumerate(tokens):
        if token.endswith(":") and not token.endswith("\\:"):
            return tokens[i + 1:]
    return []


def nvcc_plan(command, build_dir, out):
    """An NvccPlan for ninja's nvcc command building `out`, or None when its steps (nvcc
    --dryrun) are not the known single-object sequence."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return None
    if not argv or os.path.basename(argv[0]) != "nvcc":
        return None
    rest, i = [], 1
    while i < len(argv):  # torch's -MD -MF $out.d: the dependency file is written from the steps'
        if argv[i] == "-MD":
            i += 1
        elif argv[i] == "-MF" and i + 1 < len(argv):
            i += 2
        elif argv[i].startswith(("--generate-", "-M")) or argv[i] in ("--dryrun", "-dryrun", "--keep", "-keep"):
            return None
        else:
            rest.append(argv[i])
            i += 1
    keep_dir = tempfile.mkdtemp(prefix="kbrl-passes-", dir=build_dir)
    try:
        proc = subprocess.run([argv[0], "--dryrun", "--keep", "--keep-dir", keep_dir] + rest, cwd=build_dir,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    except (OSError, subprocess.SubprocessError):
        proc = None
    plan = None
    if proc is not None and proc.returncode == 0:
        plan = plan_from_dryrun(proc.stdout.decode("utf-8", "replace"), build_dir, out, keep_dir)
    if plan is None:
        shutil.rmtree(keep_dir, ignore_errors=True)
    return plan


def plan_from_dryrun(text, build_dir, out, keep_dir):
    """The plan for nvcc's listing (`#$ ` lines: its variables, then one command per line), or
    None unless it is: one host preprocess (.cpp4.ii) and cudafe++ writing the module id, per
    architecture a device preprocess (.cpp1.ii), cicc reading that id and ptxas, one fatbinary,
    and the host compile last."""
    env, steps = dict(os.environ), []
    for line in text.splitlines():
        if not line.startswith("#$ "):
            return None
        line = line[3:].strip()
        try:
            words = shlex.split(line)
        except ValueError:
            return None
        if not words:
            return None
        if re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", line):
            if steps:
                return None  # the variables come first
            name, _, value = line.partition("=")
            values = shlex.split(value)
            if len(values) <= 1:  # the others are nvcc's own lists, already expanded in the commands
                env[name] = values[0] if values else ""
            continue
        # The program may be named through a variable ("$CICC_PATH/cicc"); nothing else may.
        words[0] = re.sub(r"\$(\w+)|\$\{(\w+)\}", lambda m: env.get(m.group(1) or m.group(2), ""), words[0])
        if any("$" in w or "`" in w for w in words):
            return None
        steps.append(words)
    host, device, final, depfiles, module_id = [], [], [], [], None
    for n, argv in enumerate(steps):
        tool = os.path.basename(argv[0])
        output = argv[argv.index("-o") + 1] if "-o" in argv[:-1] else ""
        if tool == "cudafe++":
            if len(host) != 1 or argv.count("--gen_module_id_file") != 1 or "--module_id_file_name" not in argv[:-1]:
                return None
            module_id = argv[argv.index("--module_id_file_name") + 1]
            host.append([a for a in argv if a != "--gen_module_id_file"])
        elif tool in ("cicc", "ptxas", "fatbinary"):
            if tool == "cicc" and ("--module_id_file_name" not in argv[:-1]
                                   or argv[argv.index("--module_id_file_name") + 1] != module_id):
                return None
            device.append(argv)
        elif "-E" in argv and output.endswith((".cpp1.ii", ".cpp4.ii")):
            depfiles.append(os.path.join(keep_dir, "deps-{}.d".format(n)))
            argv = argv + ["-MD", "-MF", depfiles[-1]]
            if output.endswith(".cpp4.ii"):
                if host:
                    return None
                host = [argv]
            else:
                device.append(argv)
        elif "-c" in argv and n == len(steps) - 1:
            final.append(argv)
        else:
            return None  # nvlink, a second source, or anything else not planned for
    if len(host) != 2 or not final or module_id is None \
            or sum(os.path.basename(a[0]) == "fatbinary" for a in device) != 1:
        return None
    # nvcc's cudafe++ derives the id from the file's name and contents; it names the host side's
    # stand-ins for anonymous namespaces, hidden in the extension, also inside torch's headers.
    # Derived from the object's name only, it leaves those headers' text the same for every
    # source, which the prefix PCH needs.
    digest = sha256("kbrl module id\0" + out)
    base = re.sub(r"[^A-Za-z0-9]", "_", os.path.basename(out))
    with open(module_id if os.path.isabs(module_id) else os.path.join(build_dir, module_id), "w") as f:
        f.write("_{}_{}_{}_{}".format(digest[:8], len(base), base, digest[8:24]))
    return NvccPlan(build_dir, out, env, host, device, final, keep_dir, depfiles)


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


def env_prepended(name, value, sep=" "):
    """A copy of this process's environment with `value` put before what `name` holds."""
    env = dict(os.environ)
    env[name] = value if not env.get(name) else value + sep + env[name]
    return env


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
