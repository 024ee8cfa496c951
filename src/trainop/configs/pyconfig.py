"""Python config files (RETURNN ``.config``, OpenSeq2Seq ``*.py``) evaluated as data.

The file is parsed with ``ast`` and its top-level statements are evaluated by a small
interpreter that knows only: literals, containers (list, tuple, dict, set, comprehension-free),
arithmetic and comparisons, boolean operators, conditional expressions, subscripts, references
to earlier top-level names, a few pure builtins (``dict``, ``list``, ``tuple``, ``set``, ``int``,
``float``, ``str``, ``bool``, ``min``, ``max``, ``abs``, ``len``, ``sum``, ``round``, ``range``),
and names the caller resolves (``tf.float16`` -> ``"float16"``, ``NovoGrad`` -> a class).
Nothing in the file is executed: an ``import`` binds a ``Symbol`` (its dotted name, for the
caller's resolver); a ``def``, a ``class``, a ``lambda``, any other call or statement is not run
and is recorded as ``Unresolved`` with the file and line. Assigning a name again keeps the last
value, as running the file would.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PyConfig", "Symbol", "Unresolved", "evaluate_python_config"]


@dataclass(frozen=True)
class Symbol:
    """A name the config imported or referred to that the resolver did not map
    (``Symbol("tensorflow.contrib.layers.l2_regularizer")``)."""

    name: str

    def __repr__(self) -> str:
        return f"<{self.name}>"


@dataclass(frozen=True)
class Unresolved:
    """A value that needs code: ``reason`` says what, at ``filename:line``."""

    filename: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.filename}:{self.line}: {self.reason}"


@dataclass
class PyConfig:
    """The evaluated top-level names (``values``) and what could not be evaluated
    (``unresolved``: name -> ``Unresolved``; statements without a name under ``"<line N>"``)."""

    values: dict[str, Any] = field(default_factory=dict)
    unresolved: dict[str, Unresolved] = field(default_factory=dict)


class _NotData(Exception):
    def __init__(self, node: ast.AST, reason: str) -> None:
        super().__init__(reason)
        self.node, self.reason = node, reason


_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
        ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg, ast.Not: operator.not_}
_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b,
        ast.NotIn: lambda a, b: a not in b, ast.Is: operator.is_, ast.IsNot: operator.is_not}
_BUILTINS: dict[str, Callable[..., Any]] = {
    "dict": dict, "list": list, "tuple": tuple, "set": set, "int": int, "float": float,
    "str": str, "bool": bool, "min": min, "max": max, "abs": abs, "len": len, "sum": sum,
    "round": round, "range": lambda *a: list(range(*a)),
}
_CONSTANTS = {"True": True, "False": False, "None": None}
_MAX_POWER = 10_000  # 2 ** 10**9 would hang the parser: refuse huge exponents


class _Evaluator:
    def __init__(self, values: dict[str, Any], resolve: Callable[[str], Any],
                 filename: str = "<config>", partial: bool = False) -> None:
        self.values, self.resolve = values, resolve
        self.filename, self.partial = filename, partial

    def __call__(self, node: ast.AST) -> Any:
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is None:
            raise _NotData(node, f"{type(node).__name__} is code, not data")
        return method(node)

    def _Constant(self, node: ast.Constant) -> Any:
        return node.value

    def _List(self, node: ast.List) -> list:
        return [self(e) for e in node.elts]

    def _Tuple(self, node: ast.Tuple) -> tuple:
        return tuple(self(e) for e in node.elts)

    def _Set(self, node: ast.Set) -> set:
        return {self(e) for e in node.elts}

    def _Dict(self, node: ast.Dict) -> dict:
        out: dict = {}
        for k, v in zip(node.keys, node.values, strict=True):
            if k is None:  # {**other}
                out.update(self(v))
            elif self.partial:  # a value that needs code stays in place as Unresolved
                key = self(k)
                try:
                    out[key] = self(v)
                except _NotData as exc:
                    out[key] = Unresolved(self.filename, getattr(exc.node, "lineno", 0),
                                          exc.reason)
            else:
                out[self(k)] = self(v)
        return out

    def _JoinedStr(self, node: ast.JoinedStr) -> str:
        parts = []
        for v in node.values:
            if isinstance(v, ast.FormattedValue):
                if v.format_spec is not None or v.conversion not in (-1, None):
                    raise _NotData(node, "formatted string with a format spec")
                parts.append(str(self(v.value)))
            else:
                parts.append(str(self(v)))
        return "".join(parts)

    def _Name(self, node: ast.Name) -> Any:
        if node.id in self.values:
            value = self.values[node.id]
            if isinstance(value, Unresolved):
                raise _NotData(node, f"uses {node.id!r}, which could not be evaluated ({value})")
            return value
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        resolved = self.resolve(node.id)
        if resolved is _MISSING:
            raise _NotData(node, f"undefined name {node.id!r}")
        return resolved

    def _Attribute(self, node: ast.Attribute) -> Any:
        base = self(node.value)
        if isinstance(base, Symbol):
            dotted = f"{base.name}.{node.attr}"
            resolved = self.resolve(dotted)
            return Symbol(dotted) if resolved is _MISSING else resolved
        raise _NotData(node, f"attribute {node.attr!r} of a value")

    def _Subscript(self, node: ast.Subscript) -> Any:
        return self(node.value)[self(node.slice)]

    def _Slice(self, node: ast.Slice) -> slice:
        return slice(*(None if p is None else self(p) for p in (node.lower, node.upper,
                                                                 node.step)))

    def _UnaryOp(self, node: ast.UnaryOp) -> Any:
        op = _UNARY.get(type(node.op))
        if op is None:
            raise _NotData(node, "bitwise operator")
        return op(self(node.operand))

    def _BinOp(self, node: ast.BinOp) -> Any:
        op = _BIN.get(type(node.op))
        if op is None:
            raise _NotData(node, "bitwise or matrix operator")
        left, right = self(node.left), self(node.right)
        if op is operator.pow and isinstance(right, int | float) and abs(right) > _MAX_POWER:
            raise _NotData(node, f"exponent {right} too large")
        if op is operator.mul and isinstance(left, str | list | tuple) and right > 10 ** 6:
            raise _NotData(node, "repetition too large")
        return op(left, right)

    def _BoolOp(self, node: ast.BoolOp) -> Any:
        value = self(node.values[0])
        for v in node.values[1:]:
            if isinstance(node.op, ast.And) and not value:
                return value
            if isinstance(node.op, ast.Or) and value:
                return value
            value = self(v)
        return value

    def _Compare(self, node: ast.Compare) -> bool:
        left = self(node.left)
        for op, comp in zip(node.ops, node.comparators, strict=True):
            right = self(comp)
            if not _CMP[type(op)](left, right):
                return False
            left = right
        return True

    def _IfExp(self, node: ast.IfExp) -> Any:
        return self(node.body) if self(node.test) else self(node.orelse)

    def _Call(self, node: ast.Call) -> Any:
        if not isinstance(node.func, ast.Name) or node.func.id not in _BUILTINS \
                or node.func.id in self.values:
            name = ast.unparse(node.func)
            raise _NotData(node, f"calls {name}(...): code is not run")
        args = [self(a) for a in node.args]
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None:
                kwargs.update(self(kw.value))
            else:
                kwargs[kw.arg] = self(kw.value)
        return _BUILTINS[node.func.id](*args, **kwargs)


_MISSING = object()


def evaluate_python_config(source: str, filename: str = "<config>",
                           names: Mapping[str, Any] | Callable[[str], Any] | None = None,
                           *, partial: bool = False) -> PyConfig:
    """Evaluate the top-level assignments of a Python config without running it.

    Args:
        source: the file's text.
        filename: for messages (``Unresolved`` carries ``filename:line``).
        names: what bare and dotted names the config uses mean (a mapping, or a function of
            the dotted name returning the value; names it does not know stay ``Symbol``s when
            imported and are errors when used bare).
        partial: keyword-only. ``False`` (default): a dict with one value that needs code makes
            the whole assignment ``Unresolved``. ``True``: that value alone becomes an
            ``Unresolved`` inside the dict (OpenSeq2Seq's ``base_params`` mixes training
            options with initializers and data-layer code).

    Returns:
        a ``PyConfig``: ``values`` and ``unresolved``.

    Raises:
        SyntaxError: the file is not Python.
    """
    tree = ast.parse(source, filename=filename)
    config = PyConfig()
    lookup = names.get if isinstance(names, Mapping) else names

    def resolve(dotted: str) -> Any:
        if lookup is None:
            return _MISSING
        value = lookup(dotted, _MISSING) if isinstance(names, Mapping) else lookup(dotted)
        return _MISSING if value is None and not isinstance(names, Mapping) else value

    evaluate = _Evaluator(config.values, resolve, filename, partial)
    for stmt in tree.body:
        _statement(stmt, evaluate, config, filename, resolve)
    return config


def _bind(config: PyConfig, name: str, value: Any) -> None:
    config.values[name] = value
    config.unresolved.pop(name, None)


def _unresolve(config: PyConfig, name: str, where: Unresolved) -> None:
    config.values[name] = where
    config.unresolved[name] = where


def _statement(stmt: ast.stmt, evaluate: _Evaluator, config: PyConfig, filename: str,
               resolve: Callable[[str], Any]) -> None:
    line = getattr(stmt, "lineno", 0)
    if isinstance(stmt, ast.Import | ast.ImportFrom):
        prefix = "" if isinstance(stmt, ast.Import) else (stmt.module or "") + "."
        for alias in stmt.names:
            dotted = prefix + alias.name
            name = alias.asname or alias.name.split(".")[0]
            target = dotted if alias.asname or isinstance(stmt, ast.ImportFrom) else name
            resolved = resolve(target)
            _bind(config, name, Symbol(target) if resolved is _MISSING else resolved)
        return
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        kind = "class" if isinstance(stmt, ast.ClassDef) else "function"
        _unresolve(config, stmt.name, Unresolved(
            filename, line, f"{kind} {stmt.name!r} defined in the config: code is not run; "
                            f"pass it from Python"))
        return
    if isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        if stmt.value is None:
            return
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        if len(names) != len(targets):
            config.unresolved[f"<line {line}>"] = Unresolved(
                filename, line, "assignment to something other than a name: not evaluated")
            return
        try:
            value = evaluate(stmt.value)
            if isinstance(stmt, ast.AugAssign):
                op = _BIN.get(type(stmt.op))
                old = config.values.get(names[0], _MISSING)
                if op is None or old is _MISSING or isinstance(old, Unresolved):
                    raise _NotData(stmt, f"augmented assignment to {names[0]!r}")
                value = op(old, value)
        except _NotData as exc:
            where = Unresolved(filename, getattr(exc.node, "lineno", line), exc.reason)
            for name in names:
                _unresolve(config, name, where)
            return
        except Exception as exc:  # noqa: BLE001 - arithmetic on data (1/0, "a" - 1, a[9])
            where = Unresolved(filename, line, f"{type(exc).__name__}: {exc}")
            for name in names:
                _unresolve(config, name, where)
            return
        for name in names:
            _bind(config, name, value)
        return
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
        return  # a docstring
    if isinstance(stmt, ast.Pass):
        return
    config.unresolved[f"<line {line}>"] = Unresolved(
        filename, line, f"{type(stmt).__name__} statement is code: not run")
