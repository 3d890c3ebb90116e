"""Load a resolver from a Python source file without importing the module it lives in.

A target spec `path/to/file.py::Qualname.attr` names a method (or a module-level function) in a
file whose module cannot be imported here: an SGLang checkout on a machine without SGLang's
dependencies. The file is parsed with `ast`, and only what the resolver needs is compiled:

- the resolver itself;
- the other methods of its class that it (transitively) reaches as `self.name`, returned in
  `LoadedSource.self_methods` so the engine can bind them onto its fake scheduler;
- the module-level functions, classes and assignments those reach (a stride helper, a constant,
  `logger = logging.getLogger(__name__)`), again transitively.

Annotations are never evaluated: they are stripped from functions and turned into strings
elsewhere, so names used only in annotations, in `if TYPE_CHECKING:` imports or in
`typing.cast(T, x)` do not matter. Every other free name is provided as a builtin, a module-level
definition of the same file, a stand-in for a name of the engine's own package (the family's
`kvcheck.core.family.TargetLoader.stand_ins`: SGLang's finish reasons, for one), or an import
from a module that is safe to import here (the standard library, `torch`, `numpy`,
`typing_extensions`). Anything else the code touches is a `TargetLoadError` naming the name and
its module; imports nobody touches are never looked at.

The extracted code is compiled with the file's own name and line numbers, so a traceback from
inside a target points at the user's file, and coverage of what ran is measured against it:
`LoadedSource.code` lists the line spans of the compiled code that can run per call (the
resolver, its sibling methods, the module-level functions and helper-class methods they reach;
not what only runs at load time, such as a decorator's own body).

Known approximations: names bound conditionally at module level (`try: import x / except
ImportError: x = None`, either branch of an `if`) are tried in source order and the first one
that can be provided wins; imports inside function bodies are left alone and run (or fail) when
executed; methods inherited from a base class are not looked up.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import difflib
import functools
import importlib
import logging
import os
import symtable
import sys
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, NoReturn

import attrs

from kvcheck.core.family import DEFAULT_FAMILY, family
from kvcheck.core.target import CodeSpan
from kvcheck.errors import BrokenTreeCode, TargetLoadError

__all__ = [
    "LoadedClass",
    "LoadedSource",
    "definition_spans",
    "load_definitions",
    "load_from_source",
    "load_methods",
]

# Third-party top-level packages that are safe to import for a target; the standard library is
# always allowed. Anything else (sglang, triton, sgl_kernel, ...) is never imported. numpy is a
# dependency of kvcheck's (torch converts through it), and SGLang's own resolver file imports it
# (0.5.23 srt/managers/scheduler_components/batch_result_processor.py, line 15).
_SAFE_THIRD_PARTY: Final = frozenset({"torch", "numpy", "typing_extensions"})

_UNSUPPORTED_METHOD_DECORATORS: Final = frozenset(
    {"staticmethod", "classmethod", "property", "cached_property"}
)

_FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


@attrs.frozen
class LoadedSource:
    """A resolver read from source, ready to call as `resolver(self_obj, result, batch)`."""

    resolver: Callable[..., Any]
    # Other methods of the resolver's class it reaches through `self.X`, as plain functions
    # taking `self` first (static and class methods are adapted), to be bound onto the fake
    # scheduler, e.g. `function.__get__(fake, type(fake))`.
    self_methods: Mapping[str, Callable[..., Any]]
    description: str
    # Where the compiled functions live in the file, resolver first, then by line.
    code: tuple[CodeSpan, ...] = ()


def load_from_source(
    path: str, qualname: str, *, allow_unavailable: bool = False, family_name: str = DEFAULT_FAMILY
) -> LoadedSource:
    """Read `qualname` (`Class.method` or `function`) from the Python file at `path`, a resolver
    of the family `family_name` (which says what it must accept and what its file may import).

    `path` may be relative (to the current directory) and may start with `~`. Every failure is a
    `TargetLoadError` with a one-line message. With `allow_unavailable`, a name that cannot be
    provided becomes a placeholder that raises `TargetLoadError` only if it is actually used at
    run time (for code paths the harness never drives, such as grammar error handling).
    """
    file = Path(path).expanduser()
    source = _read(file, path)
    try:
        tree = ast.parse(source, filename=str(file))
    except SyntaxError as exc:
        raise TargetLoadError(
            f"{path} is not valid Python: {exc.msg} (line {exc.lineno})"
        ) from None
    except ValueError as exc:  # e.g. null bytes
        raise TargetLoadError(f"{path} is not valid Python: {exc}") from None
    targets = family(family_name).targets
    loader = _Loader(
        file, path, tree, allow_unavailable, targets.stand_ins, targets.resolver_parameters
    )
    return loader.load(qualname)


@attrs.frozen
class LoadedClass:
    """Methods of a class read from source, compiled into a class of kvcheck's making."""

    cls: type  # holds the selected methods (and those they reach through `self.X`) only
    code: tuple[CodeSpan, ...]  # where they live in the file, by line


def load_methods(
    path: str | Path,
    class_name: str,
    methods: Sequence[str],
    *,
    stand_ins: Mapping[tuple[str, str], object],
    base: type = object,
    allow_unavailable: bool = False,
) -> LoadedClass:
    """The methods `methods` of the module-level class `class_name` in the file at `path`, with
    the methods of the same class they reach as `self.X` (transitively) and the module-level
    names all of them use, compiled into a class named `class_name` whose only base is `base`.

    For an engine whose accounting is spread over many methods of one class (vLLM's scheduler):
    the caller instantiates the class on a fake `self` of its own. `super()` works and reaches
    `base` (give the compiled parent class there). Names are provided as for
    `load_from_source`, `stand_ins` keyed by (module, name); with `allow_unavailable` a name
    that cannot be provided fails only when used. Failures are one-line `TargetLoadError`s.
    """
    loader = _loader_for(Path(path), str(path), allow_unavailable, stand_ins)
    return loader.load_methods(class_name, methods, base)


def load_definitions(
    path: str | Path,
    names: Sequence[str],
    *,
    stand_ins: Mapping[tuple[str, str], object],
    allow_unavailable: bool = False,
) -> dict[str, Any]:
    """The module-level definitions `names` (functions, classes, constants) of the file at
    `path`, run with what they use and nothing else, by name: an engine's helper functions,
    enums and records, so that the engine's own code is what kvcheck passes around."""
    loader = _loader_for(Path(path), str(path), allow_unavailable, stand_ins)
    return loader.load_definitions(names)


def definition_spans(path: str | Path, names: Sequence[str]) -> tuple[CodeSpan, ...]:
    """Where the module-level functions `names` of the file at `path` live (those that are
    functions; the others are left out), as `load_definitions` compiles them: the target's
    code when an engine's helper function runs in its calls (vLLM's `check_stop`)."""
    file = Path(path).expanduser()
    tree = ast.parse(_read(file, str(path)), filename=str(file))
    found = {
        node.name: node
        for node in tree.body
        if isinstance(node, _FunctionNode) and node.name in names
    }
    return tuple(
        CodeSpan(
            file=os.path.abspath(file),
            qualname=name,
            def_line=node.lineno,
            first=node.body[0].lineno,
            last=node.end_lineno or node.body[-1].lineno,
        )
        for name, node in found.items()
    )


def _loader_for(
    file: Path,
    shown: str,
    allow_unavailable: bool,
    stand_ins: Mapping[tuple[str, str], object],
) -> _Loader:
    file = file.expanduser()
    source = _read(file, shown)
    try:
        tree = ast.parse(source, filename=str(file))
    except SyntaxError as exc:
        raise TargetLoadError(
            f"{shown} is not valid Python: {exc.msg} (line {exc.lineno})"
        ) from None
    except ValueError as exc:
        raise TargetLoadError(f"{shown} is not valid Python: {exc}") from None
    return _Loader(file, shown, tree, allow_unavailable, stand_ins, ())


def _read(file: Path, shown: str) -> bytes:
    try:
        return file.read_bytes()
    except FileNotFoundError:
        raise TargetLoadError(f"target file {shown} does not exist") from None
    except IsADirectoryError:
        raise TargetLoadError(f"target file {shown} is a directory, not a Python file") from None
    except OSError as exc:
        raise TargetLoadError(f"cannot read target file {shown}: {exc.strerror}") from None


# --------------------------------------------------------------------------------------------
# Module index: what each module-level name is bound to, without executing anything.


@attrs.frozen
class _Import:
    module: str  # dotted, with leading dots for a relative import
    attr: str | None  # `from module import attr`; None for `import module`
    binds_top_package: bool  # `import a.b` binds `a`
    type_checking_only: bool


@attrs.frozen
class _Definition:
    node: ast.stmt  # FunctionDef, AsyncFunctionDef, ClassDef, Assign or AnnAssign
    order: int  # position in the file, so the selected statements run in source order


_Binding = _Import | _Definition


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _target_names(target: ast.expr) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _target_names(element)
    elif isinstance(target, ast.Starred):
        yield from _target_names(target.value)


def _index_module(tree: ast.Module) -> dict[str, list[_Binding]]:
    """Map each module-level name to its candidate bindings.

    An unconditional binding replaces earlier ones; bindings inside `if`/`try` blocks are
    appended, so `try: import x` / `except ImportError: x = None` yields both, in source order.
    """
    bindings: dict[str, list[_Binding]] = {}
    order = 0

    def add(name: str, binding: _Binding, conditional: bool) -> None:
        if conditional:
            bindings.setdefault(name, []).append(binding)
        else:
            bindings[name] = [binding]

    def visit(body: Sequence[ast.stmt], conditional: bool, type_checking: bool) -> None:
        nonlocal order
        for stmt in body:
            order += 1
            if isinstance(stmt, ast.If):
                inner = type_checking or _is_type_checking(stmt.test)
                visit(stmt.body, True, inner)
                visit(stmt.orelse, True, type_checking)
            elif isinstance(stmt, ast.Try | ast.TryStar):
                for block in (stmt.body, stmt.orelse, stmt.finalbody):
                    visit(block, True, type_checking)
                for handler in stmt.handlers:
                    visit(handler.body, True, type_checking)
            elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                add(stmt.name, _Definition(stmt, order), conditional)
            elif isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    for name in _target_names(target):
                        add(name, _Definition(stmt, order), conditional)
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                for name in _target_names(stmt.target):
                    add(name, _Definition(stmt, order), conditional)
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    if alias.asname:
                        imp = _Import(alias.name, None, False, type_checking)
                        add(alias.asname, imp, conditional)
                    else:
                        imp = _Import(alias.name, None, True, type_checking)
                        add(alias.name.partition(".")[0], imp, conditional)
            elif isinstance(stmt, ast.ImportFrom) and stmt.module != "__future__":
                module = "." * stmt.level + (stmt.module or "")
                for alias in stmt.names:
                    if alias.name != "*":
                        imp = _Import(module, alias.name, False, type_checking)
                        add(alias.asname or alias.name, imp, conditional)

    visit(tree.body, False, False)
    return bindings


# --------------------------------------------------------------------------------------------
# Annotation stripping and free-name analysis.


class _StripAnnotations(ast.NodeTransformer):
    """Make annotations inert: dropped on functions, replaced by their source text elsewhere
    (class bodies such as dataclasses keep a string annotation), and the type argument of
    `typing.cast(T, x)` likewise turned into a string."""

    def __init__(self, cast_names: frozenset[str], typing_names: frozenset[str]) -> None:
        self._cast_names = cast_names
        self._typing_names = typing_names

    def _strip_arguments(self, args: ast.arguments) -> None:
        for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
            if arg is not None:
                arg.annotation = None

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        self._strip_arguments(node.args)
        node.returns = None
        return self.generic_visit(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> ast.AST:
        self._strip_arguments(node.args)
        node.returns = None
        return self.generic_visit(node)

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        self._strip_arguments(node.args)
        return self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        node.annotation = ast.copy_location(
            ast.Constant(ast.unparse(node.annotation)), node.annotation
        )
        return self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        func = node.func
        is_cast = (isinstance(func, ast.Name) and func.id in self._cast_names) or (
            isinstance(func, ast.Attribute)
            and func.attr == "cast"
            and isinstance(func.value, ast.Name)
            and func.value.id in self._typing_names
        )
        if is_cast and node.args:
            node.args[0] = ast.copy_location(ast.Constant(ast.unparse(node.args[0])), node.args[0])
        return self.generic_visit(node)


def _free_names(node: ast.stmt, filename: str) -> set[str]:
    """Module-level names a (stripped) statement reads when it runs or when its functions run."""
    table = symtable.symtable(ast.unparse(node), filename, "exec")
    names: set[str] = set()

    def walk(scope: symtable.SymbolTable, top: bool) -> None:
        for symbol in scope.get_symbols():
            if symbol.is_referenced() and (top or symbol.is_global()):
                names.add(symbol.get_name())
        for child in scope.get_children():
            walk(child, False)

    walk(table, True)
    return names


def _self_attributes(function: _FunctionNode) -> set[str]:
    """Attribute names read from the method's first parameter (`self.name`)."""
    params = [*function.args.posonlyargs, *function.args.args]
    if not params:
        return set()
    self_name = params[0].arg
    return {
        node.attr
        for node in ast.walk(function)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == self_name
    }


def _class_methods(cls: ast.ClassDef, prefix: str) -> Iterator[tuple[str, _FunctionNode]]:
    """The methods of a class and of the classes nested in it, with their qualnames."""
    for statement in cls.body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            yield f"{prefix}.{statement.name}", statement
        elif isinstance(statement, ast.ClassDef):
            yield from _class_methods(statement, f"{prefix}.{statement.name}")


def _local_functions(node: ast.AST) -> Iterator[_FunctionNode]:
    """The functions a function defines in its own body (under its ifs and withs too), not
    those of functions or classes nested in it."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            yield child
        elif not isinstance(child, ast.ClassDef | ast.Lambda):
            yield from _local_functions(child)


def _wrappers(
    qualname: str, function: _FunctionNode, depth: int
) -> list[tuple[str, _FunctionNode]]:
    """The functions `depth` levels inside `function`: what a decorator (1) or a decorator
    factory (2) defines for the calls of what it decorates."""
    inner = [(f"{qualname}.<locals>.{f.name}", f) for f in _local_functions(function)]
    if depth <= 1:
        return inner
    return [deeper for name, f in inner for deeper in _wrappers(name, f, depth - 1)]


def _names_read_per_call(functions: Iterable[_FunctionNode]) -> set[str]:
    """The names the bodies of these functions read: what can run when they are called. A
    function defined inside a body counts with its decorators, applied per call."""
    return {
        node.id
        for function in functions
        for statement in function.body
        for node in ast.walk(statement)
        if isinstance(node, ast.Name)
    }


def _binds(statement: ast.stmt) -> set[str]:
    """The module-level names a definition binds (a function's, an assignment's targets)."""
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {statement.name}
    if isinstance(statement, ast.Assign):
        return {name for target in statement.targets for name in _target_names(target)}
    if isinstance(statement, ast.AnnAssign):
        return set(_target_names(statement.target))
    return set()


def _names_kept(statement: ast.stmt) -> set[str]:
    """The names a module-level assignment keeps for later calls (a dispatch table's
    functions, a lambda's body), not those it calls while the module loads
    (`X = register(...)`)."""
    called_at_load: set[int] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Lambda):
            return  # its body runs when it is called, later
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            called_at_load.add(id(node.func))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(statement)
    return {
        node.id
        for node in ast.walk(statement)
        if isinstance(node, ast.Name) and id(node) not in called_at_load
    }


def _decorators_at_load(nodes: Sequence[ast.stmt], called: set[str]) -> dict[str, int]:
    """The module-level names used only as decorators of these definitions, which run when the
    code is loaded: name -> 1 for `@name`, 2 for a factory `@name(...)` (the least if both)."""
    depths: dict[str, int] = {}
    for node in nodes:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for decorator in node.decorator_list:
            depth = 1
            if isinstance(decorator, ast.Call):
                decorator, depth = decorator.func, 2
            if isinstance(decorator, ast.Name) and decorator.id not in called:
                depths[decorator.id] = min(depths.get(decorator.id, depth), depth)
    return depths


def _decorator_name(decorator: ast.expr) -> str | None:
    if isinstance(decorator, ast.Call):
        decorator = decorator.func
    if isinstance(decorator, ast.Name):
        return decorator.id
    if isinstance(decorator, ast.Attribute):
        return decorator.attr
    return None


def _signature_text(function: _FunctionNode) -> str:
    args = ast.arguments(
        posonlyargs=[ast.arg(a.arg) for a in function.args.posonlyargs],
        args=[ast.arg(a.arg) for a in function.args.args],
        vararg=ast.arg(function.args.vararg.arg) if function.args.vararg else None,
        kwonlyargs=[ast.arg(a.arg) for a in function.args.kwonlyargs],
        kw_defaults=[None for _ in function.args.kwonlyargs],
        kwarg=ast.arg(function.args.kwarg.arg) if function.args.kwarg else None,
        defaults=[],
    )
    return f"({ast.unparse(args)})"


# --------------------------------------------------------------------------------------------
# Names that cannot be provided.


class _Unavailable:
    """Stands in for a name kvcheck cannot provide; any use raises `TargetLoadError`."""

    __slots__ = ("_message",)

    def __init__(self, message: str) -> None:
        self._message = message

    def _fail(self) -> NoReturn:
        raise TargetLoadError(f"{self._message} (reached at run time)")

    def __call__(self, *args: object, **kwargs: object) -> NoReturn:
        self._fail()

    def __getattr__(self, name: str) -> NoReturn:
        if name.startswith("__"):
            raise AttributeError(name)
        self._fail()

    def __instancecheck__(self, instance: object) -> NoReturn:
        self._fail()

    def __subclasscheck__(self, subclass: object) -> NoReturn:
        self._fail()

    def __mro_entries__(self, bases: tuple[object, ...]) -> NoReturn:
        self._fail()

    def __repr__(self) -> str:
        return f"<unavailable: {self._message}>"


class _CannotProvide(Exception):
    """Internal: why one candidate binding of a name cannot be provided."""


# Resolves `from M import N` against the target's own tree (`load_from_tree`): the object, or
# `_NOT_IN_TREE` when M is not one of the tree's modules.
_TreeImports = Callable[[str, str | None], object]
_NOT_IN_TREE: Final = object()


def _import_binding(
    imp: _Import,
    stand_ins: Mapping[tuple[str, str], object],
    tree_imports: _TreeImports | None = None,
) -> object:
    if imp.type_checking_only:
        raise _CannotProvide(
            f"(imported from {imp.module} only under TYPE_CHECKING), which does not exist at "
            "run time"
        )
    if imp.module.startswith("."):
        raise _CannotProvide(
            f"(relative import from {imp.module}), which kvcheck cannot provide without "
            "importing its package"
        )
    if imp.attr is not None and (imp.module, imp.attr) in stand_ins:
        return stand_ins[(imp.module, imp.attr)]
    if tree_imports is not None:
        found = tree_imports(imp.module, imp.attr)
        if found is not _NOT_IN_TREE:
            return found
    top = imp.module.partition(".")[0]
    if top not in sys.stdlib_module_names and top not in _SAFE_THIRD_PARTY:
        raise _CannotProvide(
            f"(imported from {imp.module}), which kvcheck cannot provide without importing "
            "that module"
        )
    try:
        module = importlib.import_module(imp.module)
        if imp.attr is None:
            return importlib.import_module(top) if imp.binds_top_package else module
        try:
            return getattr(module, imp.attr)
        except AttributeError:
            return importlib.import_module(f"{imp.module}.{imp.attr}")
    except Exception as exc:
        raise _CannotProvide(
            f"(imported from {imp.module}), which cannot be imported here: "
            f"{type(exc).__name__}: {exc}"
        ) from None


def _module_name(file: Path) -> str:
    """Dotted module name: the file's stem, prefixed by the packages (`__init__.py`) above it."""
    parts = [file.stem]
    parent = file.resolve().parent
    while (parent / "__init__.py").is_file() and parent.parent != parent:
        parts.append(parent.name)
        parent = parent.parent
    return ".".join(reversed(parts))


# --------------------------------------------------------------------------------------------
# The loader.


class _Loader:
    def __init__(
        self,
        file: Path,
        shown: str,
        tree: ast.Module,
        allow_unavailable: bool,
        stand_ins: Mapping[tuple[str, str], object],
        parameters: tuple[str, ...] | None,
        *,
        overrides: Mapping[str, object] | None = None,
        tree_imports: _TreeImports | None = None,
        module_name: str | None = None,
    ) -> None:
        """`parameters`: what the target must accept (None: any signature, for code that is
        not a resolver). `overrides`: module-level names given before compiling, in place of
        what the file binds them to (a Triton wrapper's CPU equivalent). `tree_imports`:
        resolves imports from the target's own tree (`load_from_tree`)."""
        self._file = file
        self._stand_ins = stand_ins
        self._parameters = parameters
        self._signature = f"({', '.join(parameters or ())})"
        self._overrides = dict(overrides or {})
        self._tree_imports = tree_imports
        self._module_name = module_name or _module_name(file)
        self._module: types.ModuleType | None = None
        self._executed: set[int] = set()
        # Class members compiled for a tree target (`provide_members`), by qualname.
        self._member_spans: dict[str, _FunctionNode] = {}
        self._filename = str(file)
        self._shown = shown
        self._tree = tree
        self._allow_unavailable = allow_unavailable
        self._bindings = _index_module(tree)
        cast_names = frozenset(
            name
            for name, candidates in self._bindings.items()
            for b in candidates
            if isinstance(b, _Import) and b.attr == "cast" and b.module in _TYPING_MODULES
        )
        typing_names = frozenset(
            name
            for name, candidates in self._bindings.items()
            for b in candidates
            if isinstance(b, _Import) and b.attr is None and b.module in _TYPING_MODULES
        )
        self._stripper = _StripAnnotations(cast_names, typing_names)
        self._stripped: set[int] = set()
        # What the compiled namespace gets.
        self._statements: dict[int, _Definition] = {}  # id(node) -> definition
        self._provided: dict[str, object] = {}
        self._methods: dict[str, _FunctionNode] = {}
        self._target_qualname = ""
        # Whether `super()` may be used: only when the compiled class gets a real base.
        self._allow_super = False

    def load_methods(self, class_name: str, methods: Sequence[str], base: type) -> LoadedClass:
        """See `load_methods`."""
        self._target_qualname = class_name
        self._allow_super = base is not object
        _, node, _ = self._lookup([class_name])
        if not isinstance(node, ast.ClassDef):
            raise TargetLoadError(f"{class_name} in {self._shown} is not a class")
        for name in methods:
            member = _class_member(node, name)
            if not isinstance(member, ast.FunctionDef):
                raise TargetLoadError(f"no method {class_name}.{name} in {self._shown}")
            self._add_methods([node], name)
        module = self._execute(class_name)
        module.__dict__["__kvcheck_base__"] = base
        cls = self._build_class([node], module, class_name, with_base=base is not object)
        file = os.path.abspath(self._filename)
        spans = [
            CodeSpan(
                file=file,
                qualname=f"{class_name}.{name}",
                def_line=method.lineno,
                first=method.body[0].lineno,
                last=method.end_lineno or method.body[-1].lineno,
            )
            for name, method in self._methods.items()
        ]
        return LoadedClass(cls, tuple(sorted(spans, key=lambda span: span.first)))

    def load_definitions(self, names: Sequence[str]) -> dict[str, Any]:
        """See `load_definitions`."""
        for name in names:
            self._target_qualname = name
            top = [b for b in self._bindings.get(name, []) if isinstance(b, _Definition)]
            if not top:
                self._not_found(name)
            self._include_statement(top[-1], name)
        module = self._execute(", ".join(names))
        return {name: module.__dict__[name] for name in names}

    # ---- target lookup ---------------------------------------------------------------------

    def load(self, qualname: str) -> LoadedSource:
        parts = qualname.split(".")
        if not qualname or not all(part.isidentifier() for part in parts):
            raise TargetLoadError(
                f"malformed qualname {qualname!r}; expected Class.method or function"
            )
        self._target_qualname = qualname
        top, node, classes = self._lookup(parts)
        if isinstance(node, ast.ClassDef):
            methods = [s.name for s in node.body if isinstance(s, ast.FunctionDef)]
            example = f", e.g. {qualname}.{methods[0]}" if methods else ""
            raise TargetLoadError(
                f"{qualname} in {self._shown} is a class, not a function; name one of its "
                f"methods{example}"
            )
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            raise TargetLoadError(
                f"{qualname} in {self._shown} (line {node.lineno}) is not a function; a target "
                f"must be a function or method {self._signature}"
            )
        self._check_target(qualname, node)
        description = f"{qualname} from {self._shown} (line {node.lineno})"

        if classes:
            self._add_methods(classes, node.name)
        else:
            self._include_statement(top, qualname)

        module = self._execute(qualname)
        code = self._code_spans(qualname, node, classes)
        if not classes:
            resolver = module.__dict__[node.name]
            return LoadedSource(resolver, types.MappingProxyType({}), description, code)

        cls = self._build_class(classes, module, qualname)
        resolver = cls.__dict__[node.name]
        resolver.__qualname__ = qualname
        self_methods: dict[str, Callable[..., Any]] = {}
        for name in self._methods:
            if name != node.name:
                self_methods[name] = self._as_plain_method(cls, classes[-1], name)
        return LoadedSource(resolver, types.MappingProxyType(self_methods), description, code)

    def _code_spans(
        self, qualname: str, target: _FunctionNode, classes: list[ast.ClassDef]
    ) -> tuple[CodeSpan, ...]:
        """The compiled code that can run when the target is called: the target, then by line
        its siblings, the module-level functions it reaches and the methods of the module-level
        classes it reaches (a helper class doing the accounting).

        Left out, because it runs once when the code is loaded and never per call: a class's
        own body and module-level assignments, and the body of a function only ever used as a
        decorator at definition time; of such a decorator only the functions it defines for
        the calls (its wrapper, or a factory's wrapper one level deeper) are measured.
        """
        file = os.path.abspath(self._filename)
        prefix = ".".join(c.name for c in classes)
        seen = {id(target)}
        compiled: list[tuple[str, _FunctionNode]] = []
        for name, method in self._methods.items():
            if id(method) not in seen:
                seen.add(id(method))
                compiled.append((f"{prefix}.{name}", method))
        module_functions: list[tuple[str, _FunctionNode]] = []
        class_nodes: list[ast.ClassDef] = []
        for definition in self._statements.values():
            node = definition.node
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and id(node) not in seen:
                seen.add(id(node))
                module_functions.append((node.name, node))
            elif isinstance(node, ast.ClassDef):
                class_nodes.append(node)
                for method_name, method in _class_methods(node, node.name):
                    if id(method) not in seen:
                        seen.add(id(method))
                        compiled.append((method_name, method))
        everything = [(qualname, target), *compiled, *module_functions]
        load_time = _decorators_at_load(
            [*(node for _, node in everything), *class_nodes],
            called=_names_read_per_call(node for _, node in everything),
        )
        for name, node in module_functions:
            depth = load_time.get(name)
            compiled += [(name, node)] if depth is None else _wrappers(name, node, depth)
        compiled.sort(key=lambda item: item[1].lineno)
        return tuple(
            CodeSpan(
                file=file,
                qualname=name,
                def_line=node.lineno,
                first=node.body[0].lineno,
                last=node.end_lineno or node.body[-1].lineno,
            )
            for name, node in [(qualname, target), *compiled]
        )

    def _lookup(self, parts: list[str]) -> tuple[_Definition, ast.stmt, list[ast.ClassDef]]:
        """The module-level definition `parts[0]`, the statement named by `parts`, and the chain
        of classes that contain that statement."""
        classes: list[ast.ClassDef] = []
        top: _Definition | None = None
        found: ast.stmt | None = None
        for depth, part in enumerate(parts):
            if depth == 0:
                definitions = [
                    b for b in self._bindings.get(part, []) if isinstance(b, _Definition)
                ]
                imports = [b for b in self._bindings.get(part, []) if isinstance(b, _Import)]
                if not definitions and imports:
                    raise TargetLoadError(
                        f"{part} is imported into {self._shown} from {imports[0].module}, not "
                        "defined there; point the target at the file that defines it"
                    )
                top = definitions[-1] if definitions else None
                found = top.node if top else None
            else:
                assert isinstance(found, ast.ClassDef)
                classes.append(found)
                found = _class_member(found, part)
            if found is None:
                self._not_found(".".join(parts))
            if depth < len(parts) - 1 and not isinstance(found, ast.ClassDef):
                self._not_found(".".join(parts))
        assert top is not None and found is not None
        return top, found, classes

    def _not_found(self, qualname: str) -> NoReturn:
        names: list[str] = []
        for stmt in self._tree.body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                names.append(stmt.name)
            elif isinstance(stmt, ast.ClassDef):
                names.append(stmt.name)
                names.extend(
                    f"{stmt.name}.{s.name}"
                    for s in stmt.body
                    if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef)
                )
        close = difflib.get_close_matches(qualname, names, n=3, cutoff=0.5)
        if not close:  # the right method name under a wrong class name, or the reverse
            last = qualname.rpartition(".")[2]
            by_last = {n.rpartition(".")[2]: n for n in names}
            close = [by_last[m] for m in difflib.get_close_matches(last, list(by_last), n=3)]
        if close:
            hint = f"; did you mean {' or '.join(close)}?"
        elif names:
            more = f" and {len(names) - 10} more" if len(names) > 10 else ""
            hint = f"; it defines {', '.join(names[:10])}{more}"
        else:
            hint = "; it defines no functions or classes"
        raise TargetLoadError(f"no {qualname} in {self._shown}{hint}")

    def _check_target(self, qualname: str, node: _FunctionNode) -> None:
        where = f"{qualname} in {self._shown} (line {node.lineno})"
        if isinstance(node, ast.AsyncFunctionDef):
            raise TargetLoadError(
                f"{where} is an async function; a resolver is a plain function {self._signature}"
            )
        for decorator in node.decorator_list:
            name = _decorator_name(decorator)
            if name in _UNSUPPORTED_METHOD_DECORATORS:
                raise TargetLoadError(
                    f"{where} is decorated with @{name}; a resolver is a plain method "
                    f"{self._signature}"
                )
        if self._parameters is None:
            return
        args = node.args
        positional = [*args.posonlyargs, *args.args]
        if len(positional) != len(self._parameters) or args.vararg or args.kwarg or args.kwonlyargs:
            raise TargetLoadError(
                f"{where} has signature {_signature_text(node)}; a resolver must accept exactly "
                f"{self._signature} positionally"
            )

    # ---- dependency closure ------------------------------------------------------------------

    def _strip(self, node: ast.stmt) -> None:
        if id(node) not in self._stripped:
            self._stripper.visit(node)
            if self._tree_imports is not None:
                _LocalImports().visit(node)
            self._stripped.add(id(node))

    def _local_import(self, module: str, level: int, names: tuple[str, ...]) -> Any:
        """What a function-local `from module import names` (rewritten by `_LocalImports`)
        binds, resolved as the file's own imports are; a name that cannot be provided is a
        `TargetLoadError` at the call that reached it."""
        imp = self._absolute(_Import("." * level + module, None, False, False))
        values = []
        for name in names:
            if name in self._overrides:
                values.append(self._overrides[name])
                continue
            try:
                values.append(
                    _import_binding(
                        attrs.evolve(imp, attr=name), self._stand_ins, self._tree_imports
                    )
                )
            except _CannotProvide as exc:
                raise TargetLoadError(
                    f"a function in {self._shown} imports {name!r} {exc} (reached at run time)"
                ) from None
        return values[0] if len(values) == 1 else tuple(values)

    # ---- a tree's module, compiled name by name (`load_from_tree`) ---------------------------

    def provide(self, name: str) -> Any:
        """The module-level `name` of this file, compiled into the one namespace this file's
        code shares, with what it reaches (`load_from_tree`)."""
        if name not in self._provided:
            self._resolve_name(name, name)
        self.provide_namespace()
        module = self._module
        assert module is not None
        if name in module.__dict__:
            return module.__dict__[name]
        raise TargetLoadError(f"{self._shown} binds no {name!r} kvcheck can compile")

    def provide_members(
        self, class_name: str, names: Sequence[str], faked: Sequence[str] = ()
    ) -> type:
        """A bare class holding the members `names` of the top-level class `class_name` and
        every sibling they reach through `self`, properties included, compiled from this file
        into its shared namespace (for a fake to inherit: the release's own methods on
        kvcheck's fields). The siblings `faked` are left out: the fake defines them."""
        self._target_qualname = f"{class_name}.{names[0]}"
        _, _, classes = self._lookup([class_name, names[0]])
        earlier, self._methods = self._methods, {}
        for name in names:
            self._add_methods(classes, name, frozenset(faked))
        self.provide_namespace()
        assert self._module is not None
        built = self._build_class(classes, self._module, self._target_qualname)
        self._member_spans.update(
            {f"{class_name}.{name}": node for name, node in self._methods.items()}
        )
        self._methods = earlier
        return built

    def provide_namespace(self) -> None:
        """Compile what the names resolved so far need into this file's shared namespace."""
        module = self._module
        if module is None:
            module = self._module = types.ModuleType(self._module_name)
            module.__dict__.update(__file__=self._filename, __builtins__=builtins)
            module.__dict__[_LOCAL_IMPORT] = self._local_import
        module.__dict__.update(self._provided)
        pending = [
            d
            for d in sorted(self._statements.values(), key=lambda d: d.order)
            if id(d.node) not in self._executed
        ]
        self._executed.update(id(d.node) for d in pending)
        self._run([d.node for d in pending], module, module.__dict__, self._shown)

    def _add_methods(
        self, classes: list[ast.ClassDef], name: str, faked: frozenset[str] = frozenset()
    ) -> None:
        """Include method `name` of the innermost class, its `self.X` siblings (transitively)
        but the `faked` ones, and the module-level names all of them use."""
        cls = classes[-1]
        prefix = ".".join(c.name for c in classes)
        pending = [name]
        while pending:
            current = pending.pop()
            if current in self._methods:
                continue
            member = _class_member(cls, current)
            assert isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef)
            self._strip(member)
            self._methods[current] = member
            user = f"{prefix}.{current}"
            free = _free_names(member, self._filename)
            if not self._allow_super and ("super" in free or "__class__" in free):
                raise TargetLoadError(
                    f"{user} in {self._shown} (line {member.lineno}) uses super(), which "
                    "kvcheck cannot support for a method read from source"
                )
            self._resolve_names(free, user)
            for attr in sorted(_self_attributes(member) - faked):
                sibling = _class_member(cls, attr)
                if isinstance(sibling, ast.FunctionDef | ast.AsyncFunctionDef):
                    pending.append(attr)

    def _include_statement(self, definition: _Definition, user: str) -> None:
        key = id(definition.node)
        if key in self._statements:
            return
        self._statements[key] = definition
        self._strip(definition.node)
        self._resolve_names(_free_names(definition.node, self._filename), user)

    def _resolve_names(self, names: set[str], user: str) -> None:
        for name in sorted(names):
            self._resolve_name(name, user)

    def _resolve_name(self, name: str, user: str) -> None:
        if name in self._provided or name in _MODULE_DUNDERS or name == _LOCAL_IMPORT:
            return
        if name in self._overrides:
            self._provided[name] = self._overrides[name]
            return
        candidates = self._bindings.get(name)
        if candidates is None:
            if hasattr(builtins, name):
                return
            self._unprovidable(
                name, user, f", which is not defined in {self._shown} and is not a builtin"
            )
            return
        reasons: list[str] = []
        for candidate in candidates:
            if isinstance(candidate, _Definition):
                self._include_statement(candidate, name)
                return
            try:
                self._provided[name] = _import_binding(
                    self._absolute(candidate), self._stand_ins, self._tree_imports
                )
            except _CannotProvide as exc:
                reasons.append(str(exc))
            else:
                return
        self._unprovidable(name, user, f" {reasons[0]}")

    def _absolute(self, imp: _Import) -> _Import:
        """A relative import made absolute from this file's module name, for a tree target
        (a resolver's file keeps refusing relative imports: it has no package to read)."""
        if self._tree_imports is None or not imp.module.startswith("."):
            return imp
        level = len(imp.module) - len(imp.module.lstrip("."))
        base = self._module_name.split(".")[:-level]
        rest = imp.module.lstrip(".")
        return attrs.evolve(imp, module=".".join([*base, rest] if rest else base))

    def _unprovidable(self, name: str, user: str, reason: str) -> None:
        via = "" if user == self._target_qualname else f" (used by {user})"
        message = f"target uses {name!r}{via}{reason}"
        if not self._allow_unavailable:
            raise TargetLoadError(message)
        self._provided[name] = _Unavailable(message)

    # ---- compiling ---------------------------------------------------------------------------

    def _execute(self, qualname: str) -> types.ModuleType:
        """Run the selected module-level statements in a fresh module namespace."""
        module = types.ModuleType(_module_name(self._file), ast.get_docstring(self._tree))
        # The file's own logger (`logging.getLogger(__name__)`) is kept quiet: its error paths
        # (a grammar refusing a token) are scenarios kvcheck plays on purpose, not news.
        quiet = logging.getLogger(module.__name__)
        if not quiet.handlers:
            quiet.addHandler(logging.NullHandler())
        quiet.propagate = False
        module.__dict__.update(__file__=self._filename, __builtins__=builtins)
        module.__dict__.update(self._provided)
        body = [d.node for d in sorted(self._statements.values(), key=lambda d: d.order)]
        self._run(body, module, module.__dict__, qualname)
        return module

    def _run(
        self,
        body: list[ast.stmt],
        module: types.ModuleType,
        local: dict[str, Any],
        qualname: str,
    ) -> None:
        if not body:
            return
        tree = ast.fix_missing_locations(ast.Module(body=body, type_ignores=[]))
        try:
            code = compile(tree, self._filename, "exec", dont_inherit=True)
            # What the target's code prints while loading is not kvcheck's report (stdout).
            with _registered_while_running(module), contextlib.redirect_stdout(sys.stderr):
                exec(code, module.__dict__, local)
        except TargetLoadError:
            raise
        except Exception as exc:
            tb = exc.__traceback__
            line = None
            while tb is not None:
                if tb.tb_frame.f_code.co_filename == self._filename:
                    line = tb.tb_lineno
                tb = tb.tb_next
            at = f" (line {line})" if line else ""
            raise TargetLoadError(
                f"preparing {qualname} from {self._shown} failed{at}: {type(exc).__name__}: {exc}"
            ) from None

    def _build_class(
        self,
        classes: list[ast.ClassDef],
        module: types.ModuleType,
        qualname: str,
        *,
        with_base: bool = False,
    ) -> type:
        """A bare class (no decorators; no bases, or the module's `__kvcheck_base__`) holding
        only the selected methods."""
        owner = classes[-1]
        methods = sorted(self._methods.values(), key=lambda m: m.lineno)
        bases: list[ast.expr] = [ast.Name("__kvcheck_base__", ast.Load())] if with_base else []
        cls_node = ast.ClassDef(
            name=owner.name, bases=bases, keywords=[], body=list(methods), decorator_list=[]
        )
        ast.copy_location(cls_node, owner)
        local: dict[str, Any] = {}
        self._run([cls_node], module, local, qualname)
        cls = local[owner.name]
        assert isinstance(cls, type)
        return cls

    def _as_plain_method(self, cls: type, owner: ast.ClassDef, name: str) -> Callable[..., Any]:
        value = cls.__dict__[name]
        if isinstance(value, types.FunctionType):
            return value
        if isinstance(value, staticmethod):
            return _adapt_static(value.__func__)
        if isinstance(value, classmethod):
            return _adapt_class(value.__func__)
        raise TargetLoadError(
            f"the target uses self.{name}, a {type(value).__name__} of {owner.name} in "
            f"{self._shown}, which kvcheck cannot bind onto its fake scheduler"
        )


_TYPING_MODULES: Final = frozenset({"typing", "typing_extensions"})
# The name a function-local import is rewritten to call (`_LocalImports`).
_LOCAL_IMPORT: Final = "__kvcheck_import__"


class _LocalImports(ast.NodeTransformer):
    """Rewrite `from M import a as b` inside function bodies into `b = __kvcheck_import__("M",
    level, ("a",))`, so a tree target's function-local imports resolve as its file's own do
    (the same tree, stand-ins, overrides), when the function runs. Module-level imports are
    indexed, never executed, and stay as they are."""

    def __init__(self) -> None:
        self._depth = 0

    def _function(self, node: ast.AST) -> ast.AST:
        self._depth += 1
        try:
            return self.generic_visit(node)
        finally:
            self._depth -= 1

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST:
        if (
            self._depth == 0
            or node.module == "__future__"
            or any(a.name == "*" for a in node.names)
        ):
            return node
        targets: list[ast.expr] = [ast.Name(a.asname or a.name, ast.Store()) for a in node.names]
        call = ast.Call(
            ast.Name(_LOCAL_IMPORT, ast.Load()),
            [
                ast.Constant(node.module or ""),
                ast.Constant(node.level),
                ast.Tuple([ast.Constant(a.name) for a in node.names], ast.Load()),
            ],
            [],
        )
        target: ast.expr = targets[0] if len(targets) == 1 else ast.Tuple(targets, ast.Store())
        return ast.copy_location(ast.Assign([target], call), node)


_MODULE_DUNDERS: Final = frozenset(
    {"__name__", "__file__", "__doc__", "__builtins__", "super", "__class__"}
)


@contextlib.contextmanager
def _registered_while_running(module: types.ModuleType) -> Iterator[None]:
    """Make the module findable in `sys.modules` while its extracted code runs (`dataclasses`
    resolves string annotations through it); never shadows a module that is already there."""
    name = module.__name__
    if name in sys.modules:
        yield
        return
    sys.modules[name] = module
    try:
        yield
    finally:
        del sys.modules[name]


def _class_member(cls: ast.ClassDef, name: str) -> ast.stmt | None:
    """The last statement of the class body that binds `name`."""
    found: ast.stmt | None = None
    for stmt in cls.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if stmt.name == name:
                found = stmt
        elif isinstance(stmt, ast.Assign):
            if any(name in _target_names(t) for t in stmt.targets):
                found = stmt
        elif isinstance(stmt, ast.AnnAssign) and name in _target_names(stmt.target):
            found = stmt
    return found


def _adapt_static(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def method(self: object, *args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    return method


def _adapt_class(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def method(self: object, *args: Any, **kwargs: Any) -> Any:
        return function(type(self), *args, **kwargs)

    return method


# --------------------------------------------------------------------------------------------
# A whole package tree as the target (a release's own allocation code).


class TreeSource:
    """Functions and class members of a package tree on disk (an SGLang release), each read
    from source as `load_from_source` reads a resolver, with what a tree's code needs beyond a
    resolver's (issue 21):

    - any signature, and class members that are properties;
    - `from <package>.M import N` resolved against the same tree: N is compiled from M's file
      (one shared namespace per file, so the functions of a file see each other);
    - function-local imports, resolved the same way when they run;
    - `overrides`: names given instead of what any file of the tree binds them to (a Triton
      kernel's CPU equivalent, a settings accessor), substituted before compiling;
    - a name one release lacks: `has` says so, and `function` refuses it in one line.

    Names nothing reaches are never looked at; what cannot be provided becomes a placeholder
    that raises `TargetLoadError` when reached at run time (`allow_unavailable`).
    """

    def __init__(
        self,
        root: Path,
        package: str,
        *,
        overrides: Mapping[str, object] | None = None,
        family_name: str = DEFAULT_FAMILY,
    ) -> None:
        """`root` is the directory holding the package directory `package` (the unpacked
        release, or a checkout's `python/`)."""
        self.root = root
        self.package = package
        self._overrides = dict(overrides or {})
        self._stand_ins = family(family_name).targets.stand_ins
        self._loaders: dict[str, _Loader] = {}
        self._in_progress: set[tuple[str, str]] = set()
        self._entries: set[str] = set()  # the functions asked for by name (`function`)

    def file_of(self, module: str) -> Path:
        """The source file of a dotted module of the tree (which may not exist)."""
        base = self.root.joinpath(*module.split("."))
        package_init = base / "__init__.py"
        return package_init if package_init.is_file() else base.with_suffix(".py")

    def has(self, module: str, name: str) -> bool:
        """Whether `module`'s file defines the top-level `name` (`Class.member` for a member)."""
        file = self.file_of(module)
        if not file.is_file():
            return False
        loader = self._loader(module)
        head, _, member = name.partition(".")
        definitions = [b for b in loader._bindings.get(head, []) if isinstance(b, _Definition)]
        if not definitions:
            return False
        if not member:
            return True
        node = definitions[-1].node
        return isinstance(node, ast.ClassDef) and _class_member(node, member) is not None

    def function(self, module: str, name: str) -> Any:
        """The top-level `name` of `module`, compiled with what it reaches, and counted as code
        driven (`code`)."""
        found = self.binding(module, name)
        self._entries.add(name)
        return found

    def binding(self, module: str, name: str) -> Any:
        """The top-level `name` of `module` as its code sees it (a class a fake registers with
        for the release's `isinstance` checks), compiled without counting as code driven."""
        if not self.has(module, name):
            raise TargetLoadError(
                f"{self.file_of(module)} defines no {name}, which kvcheck drives in this release"
            )
        return self._loader(module).provide(name)

    def members(
        self, module: str, class_name: str, names: Sequence[str], faked: Sequence[str] = ()
    ) -> type:
        """A bare class with the members `names` of `module`'s `class_name` and the siblings
        they reach through `self` (properties included), for a fake to inherit; the siblings
        `faked` are not compiled (the fake defines them, and they never run as written)."""
        for name in names:
            if not self.has(module, f"{class_name}.{name}"):
                raise TargetLoadError(
                    f"{self.file_of(module)} defines no {class_name}.{name}, which kvcheck "
                    "drives in this release"
                )
        return self._loader(module).provide_members(class_name, names, faked)

    def code(self) -> tuple[CodeSpan, ...]:
        """Where the compiled functions of every file that can run per call live, by file and
        line (coverage): the functions asked for (`function`), the class members
        (`members`), and the module-level functions their bodies reach, transitively. A
        function only module-level code calls (a registry's `register_algorithm(...)`, a
        settings default) runs when the tree is compiled, never per call: left out, as
        `load_from_source` leaves out a decorator's body."""
        members = [
            node for loader in self._loaders.values() for node in loader._member_spans.values()
        ]
        statements = [
            definition.node
            for loader in self._loaders.values()
            for definition in loader._statements.values()
            if not isinstance(definition.node, ast.ClassDef)
        ]
        # Names match across files: a tree's imports rarely rename (`from M import N`). A
        # module-level assignment a body reads passes on what it reads (a dispatch table's
        # functions).
        reached = set(self._entries) | _names_read_per_call(members)
        per_call: set[int] = set()
        grew = True
        while grew:
            grew = False
            for node in statements:
                if id(node) in per_call or not _binds(node) & reached:
                    continue
                per_call.add(id(node))
                grew = True
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    reached |= _names_read_per_call([node])
                else:
                    reached |= _names_kept(node)
        spans: list[CodeSpan] = []
        for loader in self._loaders.values():
            file = os.path.abspath(loader._filename)
            for definition in loader._statements.values():
                node = definition.node
                if (
                    isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                    and id(node) in per_call
                ):
                    spans.append(
                        CodeSpan(
                            file,
                            node.name,
                            node.lineno,
                            node.body[0].lineno,
                            node.end_lineno or node.body[-1].lineno,
                        )
                    )
            for name, method in loader._member_spans.items():
                spans.append(
                    CodeSpan(
                        file,
                        name,
                        method.lineno,
                        method.body[0].lineno,
                        method.end_lineno or method.body[-1].lineno,
                    )
                )
        return tuple(sorted(spans, key=lambda s: (s.file, s.first)))

    def _loader(self, module: str) -> _Loader:
        loader = self._loaders.get(module)
        if loader is None:
            file = self.file_of(module)
            try:
                source = _read(file, str(file))
                tree = ast.parse(source, filename=str(file))
            except TargetLoadError as exc:
                raise BrokenTreeCode(str(exc)) from None
            except SyntaxError as exc:
                raise BrokenTreeCode(
                    f"{file} is not valid Python: {exc.msg} (line {exc.lineno})"
                ) from None
            except ValueError as exc:  # null bytes, which 3.11 refuses this way
                raise BrokenTreeCode(f"{file} is not valid Python: {exc}") from None
            loader = self._loaders[module] = _Loader(
                file,
                str(file),
                tree,
                True,
                self._stand_ins,
                None,
                overrides=self._overrides,
                tree_imports=self._import,
                module_name=module,
            )
        return loader

    def _import(self, module: str, attr: str | None) -> object:
        """`from module import attr` for a module of this tree (`_NOT_IN_TREE` otherwise)."""
        if module != self.package and not module.startswith(self.package + "."):
            return _NOT_IN_TREE
        if attr is None:
            raise _CannotProvide(f"(module {module} of the target's tree, imported whole)")
        if not self.file_of(module).is_file() and self.file_of(f"{module}.{attr}").is_file():
            raise _CannotProvide(f"(submodule {module}.{attr} of the target's tree)")
        if not self.has(module, attr):
            raise _CannotProvide(f"(from {module}, which does not define it in this tree)")
        key = (module, attr)
        if key in self._in_progress:
            raise _CannotProvide(f"(from {module}: an import cycle kvcheck does not follow)")
        self._in_progress.add(key)
        try:
            return self._loader(module).provide(attr)
        except TargetLoadError as exc:
            raise _CannotProvide(f"(from {module}: {exc})") from None
        finally:
            self._in_progress.discard(key)
