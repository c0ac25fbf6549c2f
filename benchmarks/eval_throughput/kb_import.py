"""Imports KernelBench's own evaluation code from a checkout, on a machine without its extras.

KernelBench is not installed on the GPU machine and nothing can be installed there, so its
package is used from the checkout (`<checkout>/src`). Importing it as a package runs its
`__init__.py`, which imports `utils.py`, which imports the LLM clients (python-dotenv, openai,
litellm) at module level; `eval.py` imports pydantic at module level. Where those are missing,
each KernelBench module is executed from its own source with only the import statements of the
missing packages left out, plus the top-level statements that use their names (`load_dotenv()`).
Functions that use a left-out name stay defined and would fail only if called; the evaluation
path calls none of them. The one name the evaluation path needs from a missing package is
pydantic's `BaseModel` (the base of `KernelExecResult`, a plain record): where pydantic is missing
it is replaced by `RecordModel` below, which builds the record the same way (keyword arguments
over annotated fields with copied defaults). Everything that is done is written to `notes`, and
the runner reports it with the results. With every package present, the checkout is imported as
it is and nothing is replaced.

KBT_PRETEND_MISSING (comma-separated top-level package names) treats installed packages as
missing; the tests use it to exercise the GPU machine's path on a machine that has them.
"""
import ast
import copy
import importlib
import os
import sys
import types

# The modules the runner uses, in dependency order (utils first, as the package's __init__ does).
MODULES = ("utils", "timing", "dataset", "eval", "compile")


class RecordModel:
    """Stands in for pydantic.BaseModel where pydantic is not installed: a record built from
    keyword arguments over the class's annotated fields, each default copied per instance (as
    pydantic copies mutable defaults), with attribute access and `model_dump()`."""

    def __init__(self, **values):
        fields = self._fields()
        unknown = set(values) - set(fields)
        if unknown:
            raise TypeError("{}: unknown fields {}".format(type(self).__name__, sorted(unknown)))
        for name in fields:
            if name in values:
                setattr(self, name, values[name])
            else:
                setattr(self, name, copy.deepcopy(getattr(type(self), name, None)))

    @classmethod
    def _fields(cls):
        names = []
        for klass in reversed(cls.__mro__):
            for name in klass.__dict__.get("__annotations__", {}):
                if name not in names:
                    names.append(name)
        return names

    def model_dump(self):
        return {name: getattr(self, name) for name in self._fields()}

    def __repr__(self):
        return "{}({})".format(type(self).__name__, ", ".join(
            "{}={!r}".format(k, v) for k, v in self.model_dump().items()))


SUBSTITUTES = {("pydantic", "BaseModel"): RecordModel}


def _pretended_missing():
    return {n.strip() for n in os.environ.get("KBT_PRETEND_MISSING", "").split(",") if n.strip()}


def _available(package):
    if package in _pretended_missing():
        return False
    try:
        importlib.import_module(package)
        return True
    except ImportError:
        return False


def _root(node):
    """Top-level package names an import statement needs (relative imports need none)."""
    if isinstance(node, ast.Import):
        return {alias.name.split(".")[0] for alias in node.names}
    if isinstance(node, ast.ImportFrom) and not node.level:
        return {node.module.split(".")[0]}
    return set()


def _bound_names(node):
    return {(alias.asname or alias.name).split(".")[0] for alias in node.names}


def _names_used(node):
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _exec_without(fullname, path, missing, notes):
    """Executes the module at `path` as `fullname`, leaving out the imports of `missing` packages
    and the top-level statements (other than definitions) that use the names they would bind."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    module = types.ModuleType(fullname)
    module.__file__ = path
    module.__package__ = fullname.rpartition(".")[0]
    dropped, body = set(), []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and _root(node) & missing:
            names = _bound_names(node)
            for name in names:
                package = next(iter(_root(node)))
                substitute = SUBSTITUTES.get((package, name))
                if substitute is not None:
                    setattr(module, name, substitute)
                    notes.append("{}: {}.{} replaced by kb_import.RecordModel".format(fullname, package, name))
                else:
                    dropped.add(name)
            notes.append("{}: left out line {}: {}".format(fullname, node.lineno, ast.unparse(node)))
            continue
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and _names_used(node) & dropped:
            notes.append("{}: left out line {}: {}".format(fullname, node.lineno, ast.unparse(node)))
            continue
        body.append(node)
    tree.body = body
    sys.modules[fullname] = module
    try:
        exec(compile(tree, path, "exec"), module.__dict__)
    except BaseException:
        sys.modules.pop(fullname, None)
        raise
    return module


def _imported_packages(path):
    """Top-level packages that the module at `path` imports at module level."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    roots = set()
    for node in tree.body:
        roots |= _root(node)
    return roots


def _forget_kernelbench():
    for name in list(sys.modules):
        if name == "kernelbench" or name.startswith("kernelbench."):
            del sys.modules[name]


def load(checkout):
    """Returns (namespace with the KernelBench modules as attributes, notes)."""
    src = os.path.join(os.path.abspath(checkout), "src")
    package_dir = os.path.join(src, "kernelbench")
    if not os.path.isfile(os.path.join(package_dir, "eval.py")):
        raise SystemExit("{}: no src/kernelbench/eval.py: not a KernelBench checkout".format(checkout))
    if src not in sys.path:
        sys.path.insert(0, src)
    notes = []
    if not _pretended_missing():
        try:
            modules = {name: importlib.import_module("kernelbench." + name) for name in MODULES}
            notes.append("imported as a package from {}".format(src))
            return types.SimpleNamespace(**modules), notes
        except ImportError as exc:
            notes.append("importing the package failed ({}: {}); loading its modules one by one".format(
                type(exc).__name__, exc))
            _forget_kernelbench()
    package = types.ModuleType("kernelbench")
    package.__path__ = [package_dir]
    package.__file__ = os.path.join(package_dir, "__init__.py")
    package.__package__ = "kernelbench"
    sys.modules["kernelbench"] = package
    notes.append("kernelbench/__init__.py not run (it only imports utils, loaded below)")
    modules = {}
    for name in MODULES:
        fullname = "kernelbench." + name
        path = os.path.join(package_dir, name + ".py")
        missing = {root for root in _imported_packages(path) if root != "kernelbench" and not _available(root)}
        for root in sorted(missing):
            why = "treated as missing (KBT_PRETEND_MISSING)" if root in _pretended_missing() else "not installed"
            notes.append("{}: package {} is {}".format(fullname, root, why))
        if missing:
            module = _exec_without(fullname, path, missing, notes)
        else:
            module = importlib.import_module(fullname)
        setattr(package, name, module)
        modules[name] = module
    return types.SimpleNamespace(**modules), notes
