"""Python config files (RETURNN ``.config``, OpenSeq2Seq ``*.py``) evaluated as data.

The file is parsed with ``ast`` and its top-level statements are evaluated by a small
interpreter that knows only: literals, containers, comprehensions over data, arithmetic and
comparisons, boolean operators, conditional expressions, subscripts, references to earlier
top-level names, the pure functions of ``trainop.configs.pure`` (builtins such as ``list``,
``range``, ``min``; numpy's ``linspace``/``arange``/``geomspace``/``logspace``/``concatenate``,
computed by numpy itself), and names the caller resolves (``tf.float16`` -> ``"float16"``,
``NovoGrad`` -> a class). ``if`` statements whose test is data run the chosen branch.

Nothing in the file is executed: an ``import`` binds a ``Symbol`` (its dotted name, for the
caller's resolver; the module is never imported); a ``def``, a ``class``, a ``lambda``, any
other call or statement is not run and is recorded as ``Unresolved`` with the file and line,
and so is every name such a statement assigns (a name assigned in a ``for`` loop, a name
whose value an item assignment changed). Assigning a name again keeps the last value, as
running the file would. Every value is bounded (``trainop.configs.bounds``): a file that
would build more is a ``RecipeError``, and so is a file that is not Python.
"""

from __future__ import annotations

import ast
import io
import operator
import tokenize
from collections import ChainMap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trainop.configs.bounds import (
    MAX_FSTRING_FIELDS,
    MAX_SYNTAX_DEPTH,
    MAX_WEIGHT,
    BoundExceeded,
    KeyGuard,
    Meter,
    check_hashes,
    check_int_bits,
    check_weight,
    is_numpy_scalar,
)
from trainop.configs.errors import RecipeError
from trainop.configs.paths import OS_PATH
from trainop.configs.percent import NotFormattable, percent_format
from trainop.configs.pure import BUILTINS, NUMPY, NotPure, elements, is_array
from trainop.configs.reads import Reads, tracked
from trainop.configs.returnn_lookups import LOOKUPS, LookupError_, Text, lookup_cost
from trainop.configs.returnn_lookups import lookup as config_lookup

__all__ = ["PyConfig", "Symbol", "Unresolved", "evaluate_python_config", "parse_python"]


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
    #: the names the file's ``config.<lookup>(name, ...)`` calls asked for
    looked_up: set[str] = field(default_factory=set)
    #: which given names each top-level value read (``configs.reads``: ``reads.of(name)``)
    reads: Reads = field(default_factory=Reads, compare=False, repr=False)


class _NotData(Exception):
    def __init__(self, node: ast.AST, reason: str) -> None:
        super().__init__(reason)
        self.node, self.reason = node, reason


class _Bound(Exception):
    """A bound exceeded at ``node`` (becomes a ``RecipeError`` with the line)."""

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
_CONSTANTS = {"True": True, "False": False, "None": None}
_SEQUENCES = (str, bytes, list, tuple)
_MISSING = object()


class _Evaluator:
    def __init__(self, values: dict[str, Any], resolve: Callable[[str], Any],
                 filename: str = "<config>", partial: bool = False) -> None:
        self.values, self.resolve = values, resolve
        self.filename, self.partial = filename, partial
        self.meter = Meter()
        self.scopes: list[dict[str, Any]] = []  # comprehension variables, innermost last
        self.given: Mapping[str, Any] = {}  # values set by the user (``config.*`` lookups)
        self.looked_up: set[str] = set()  # names asked for by ``config.*`` lookups
        self.reads = Reads()  # the given names each value read (``configs.reads``)

    def __call__(self, node: ast.AST) -> Any:
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is None:
            raise _NotData(node, f"{type(node).__name__} is code, not data")
        try:
            value = method(node)
            self.meter.check(value)
        except BoundExceeded as exc:
            raise _Bound(node, exc.reason) from None
        return value

    def built(self, value: Any) -> Any:
        """Count a newly built value's elements (a string's characters, an array's size) as
        work."""
        if isinstance(value, list | tuple | dict | set | str | bytes):
            self.meter.charge(len(value))
        elif is_array(value):
            self.meter.charge(int(value.size))
        return value

    # ------------------------------------------------------------------ literals, containers
    def _Constant(self, node: ast.Constant) -> Any:
        return node.value

    def _elements(self, elts: list[ast.expr]) -> list:
        out: list = []
        for e in elts:
            if isinstance(e, ast.Starred):
                out.extend(self._iterate(e, self(e.value)))
            else:
                out.append(self(e))
        check_weight(1 + sum(self.meter.weight(v) for v in out), "the sequence")
        return out

    def _List(self, node: ast.List) -> list:
        return self.built(self._elements(node.elts))

    def _Tuple(self, node: ast.Tuple) -> tuple:
        return self.built(tuple(self._elements(node.elts)))

    def _Set(self, node: ast.Set) -> set:
        return self.built(set(check_hashes(self._elements(node.elts))))

    def _Dict(self, node: ast.Dict) -> dict:
        out: dict = {}
        weight = 1
        guard = KeyGuard()
        for k, v in zip(node.keys, node.values, strict=True):
            if k is None:  # {**other}
                other = self(v)
                if not isinstance(other, Mapping):
                    raise _NotData(node, "** of a value that is not a dict")
                for key in other:
                    guard.add(key)
                out.update(other)
                weight += self.meter.weight(other)
            else:
                key = guard.add(self(k))
                try:
                    out[key] = self(v)
                except _NotData as exc:
                    if not self.partial:  # one value that needs code: the whole dict does
                        raise
                    out[key] = Unresolved(self.filename, getattr(exc.node, "lineno", 0),
                                          exc.reason)
                weight += self.meter.weight(key) + self.meter.weight(out[key])
            check_weight(weight, "the dict")
        return self.built(out)

    def _JoinedStr(self, node: ast.JoinedStr) -> str:
        parts, size = [], 0
        for v in node.values:
            self.meter.charge(1)
            if isinstance(v, ast.FormattedValue):
                if v.format_spec is not None or v.conversion not in (-1, None):
                    raise _NotData(node, "formatted string with a format spec")
                parts.append(BUILTINS["str"](self.meter, [self(v.value)], {}))
            else:
                parts.append(str(self(v)))
            size += len(parts[-1])  # a running total: linear in the parts, however many
            check_weight(size, "the string")
        return self.built("".join(parts))

    # ------------------------------------------------------------------ names
    def _Name(self, node: ast.Name) -> Any:
        for scope in reversed(self.scopes):
            if node.id in scope:
                return scope[node.id]
        self.reads.name(node.id)
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

    # ------------------------------------------------------------------ operators
    def _Subscript(self, node: ast.Subscript) -> Any:
        self.reads.name("globals")
        if _is_globals_call(node.value) and "globals" not in self.values:
            name = self(node.slice)  # globals()["name"]: the global itself
            if not isinstance(name, str) or not name.isidentifier():
                raise _NotData(node, "globals() indexed by other than a name")
            return self._Name(ast.Name(id=name, ctx=ast.Load(), lineno=node.lineno,
                                       col_offset=node.col_offset))
        value, index = self(node.value), self(node.slice)
        if not isinstance(value, list | tuple | str | bytes | dict) and not is_array(value):
            raise _NotData(node, f"subscript of {type(value).__name__}")
        if is_array(value) and not isinstance(index, int | slice):
            raise _NotData(node, "an array indexed by other than an int or a slice")
        return self.built(value[index])

    def _Slice(self, node: ast.Slice) -> slice:
        return slice(*(None if p is None else self(p) for p in (node.lower, node.upper,
                                                                 node.step)))

    def _UnaryOp(self, node: ast.UnaryOp) -> Any:
        op = _UNARY.get(type(node.op))
        if op is None:
            raise _NotData(node, "bitwise operator")
        operand = self(node.operand)
        if op is not operator.not_ and not _is_number(operand) and not is_array(operand):
            raise _NotData(node, f"unary operator on {type(operand).__name__}")
        return op(operand)

    def _BinOp(self, node: ast.BinOp) -> Any:
        op = _BIN.get(type(node.op))
        if op is None:
            raise _NotData(node, "bitwise or matrix operator")
        left, right = self(node.left), self(node.right)
        return self.built(self._binary(node, op, left, right))

    def _binary(self, node: ast.AST, op: Callable[[Any, Any], Any], left: Any, right: Any
                ) -> Any:
        """``op(left, right)`` after checking the result's size (sequences, integers)."""
        if _is_number(left) and _is_number(right):
            if op is operator.pow and isinstance(left, int) and isinstance(right, int) \
                    and right > 0 and abs(left) > 1:  # at least these bits: refuse first
                check_int_bits((left.bit_length() - 1) * right + 1)
            return op(left, right)  # products of bounded ints are cheap; checked after
        if op is operator.mod and isinstance(left, str):
            try:
                return percent_format(left, right)
            except NotFormattable as exc:
                raise _NotData(node, f"'...' % ...: {exc}") from None
        if op is operator.mul and (isinstance(left, _SEQUENCES) or isinstance(right, _SEQUENCES)):
            seq, count = (left, right) if isinstance(left, _SEQUENCES) else (right, left)
            if not isinstance(count, int):
                raise _NotData(node, f"a sequence times {type(count).__name__}")
            n = max(count, 0)
            check_weight(1 + n * (self.meter.weight(seq) - 1), "the repeated sequence")
            return op(left, right)  # its elements are counted as work when built
        if op is operator.add and isinstance(left, _SEQUENCES) and type(left) is type(right):
            check_weight(self.meter.weight(left) + self.meter.weight(right),
                         "the concatenation")
            return op(left, right)
        if is_array(left) or is_array(right):
            return self._array_binary(node, op, left, right)
        raise _NotData(node, f"operator on {type(left).__name__} and {type(right).__name__}")

    def _array_binary(self, node: ast.AST, op: Callable[[Any, Any], Any], left: Any,
                      right: Any) -> Any:
        shapes = {getattr(v, "shape", None) for v in (left, right) if is_array(v)}
        others = [v for v in (left, right) if not is_array(v)]
        if len(shapes) != 1 or any(not _is_number(v) for v in others):
            raise _NotData(node, "an array operator other than with a number or an array of "
                                 "the same shape")
        import numpy

        with numpy.errstate(all="ignore"):
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
            if is_array(left) or is_array(right):
                raise _NotData(node, "a comparison of arrays")
            self.meter.charge(self.meter.weight(left) + self.meter.weight(right))
            if not _CMP[type(op)](left, right):
                return False
            left = right
        return True

    def _IfExp(self, node: ast.IfExp) -> Any:
        test = self(node.test)
        if is_array(test):
            raise _NotData(node, "the truth of an array")
        return self(node.body) if test else self(node.orelse)

    # ------------------------------------------------------------------ calls
    def _Call(self, node: ast.Call) -> Any:
        function = self._function(node)
        args: list = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                args.extend(self._iterate(a, self(a.value)))
            else:
                args.append(self(a))
        kwargs: dict = {}
        for kw in node.keywords:
            if kw.arg is None:
                more = self(kw.value)
                if not isinstance(more, Mapping):
                    raise _NotData(node, "** of a value that is not a dict")
                kwargs.update(more)
            else:
                kwargs[kw.arg] = self(kw.value)
        try:
            return self.built(function(self.meter, args, kwargs))
        except NotPure as exc:
            raise _NotData(node, f"calls {ast.unparse(node.func)}(...) with arguments that are "
                                 f"not data: {exc}") from None

    def _function(self, node: ast.Call) -> Callable[..., Any]:
        func = node.func
        if isinstance(func, ast.Name):
            self.reads.name(func.id)
        if isinstance(func, ast.Name) and func.id in BUILTINS and func.id not in self.values \
                and not any(func.id in scope for scope in self.scopes):
            return BUILTINS[func.id]
        target = None
        if isinstance(func, ast.Attribute | ast.Name):
            try:
                target = self(func)
            except _NotData:
                target = None
        if isinstance(target, Symbol) and target.name in NUMPY:
            return NUMPY[target.name]
        if isinstance(target, Symbol) and target.name in OS_PATH:
            return OS_PATH[target.name]
        if self._is_config_lookup(func):
            return self._config_lookup(func.attr)
        raise _NotData(node, f"calls {_short(ast.unparse(func))}(...): code is not run")

    def _is_config_lookup(self, func: ast.expr) -> bool:
        """``config.<lookup>`` with ``config`` RETURNN's own (unbound in the file, or bound to
        ``globals()["config"]``)."""
        self.reads.name("config")
        return (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                and func.value.id == "config" and func.attr in LOOKUPS
                and self.values.get("config", RETURNN_CONFIG) == RETURNN_CONFIG
                and not any("config" in scope for scope in self.scopes))

    def _config_lookup(self, method: str) -> Callable[[Any, list, dict], Any]:
        """RETURNN's ``config.<method>`` over what is set so far: the user's values, then
        the file's own earlier assignments (``configs.returnn_lookups``)."""
        def call(meter: Any, args: list, kwargs: dict) -> Any:
            typed = ChainMap(self.values, self.given)  # a view: one lookup, nothing copied
            key = args[0] if args else kwargs.get("key")
            if isinstance(key, str):
                self.looked_up.add(key)
                self.reads.key(key)  # asked for, set or not
                self.reads.name(key)  # the file's own earlier value of it
            if isinstance(key, str) and isinstance(typed.get(key), Unresolved):
                raise NotPure(f"{key!r} could not be evaluated ({typed[key]})")
            meter.charge(1 + lookup_cost(method, typed.get(key) if isinstance(key, str)
                                         else None))
            try:
                return config_lookup(method, typed, args, kwargs)
            except (LookupError_, IndexError, TypeError) as exc:
                raise NotPure(str(exc)) from None

        return call

    # ------------------------------------------------------------------ comprehensions
    def _iterate(self, node: ast.AST, value: Any) -> list:
        if isinstance(value, bytes):
            self.meter.charge(len(value))
            return list(value)
        try:
            return list(elements(self.meter, value))
        except NotPure as exc:
            raise _NotData(node, str(exc)) from None

    def _comprehension(self, node: Any, element: Callable[[], Any]) -> list:
        out: list = []
        weight = [1]

        def run(level: int) -> None:
            if level == len(node.generators):
                item = element()
                weight[0] += self.meter.weight(item)
                check_weight(weight[0], "the comprehension")
                out.append(item)
                return
            gen = node.generators[level]
            if gen.is_async:
                raise _NotData(node, "async comprehension")
            for value in self._iterate(gen.iter, self(gen.iter)):
                self.meter.charge(1)
                self._bind_target(gen.target, value)
                if all(self(test) for test in gen.ifs):
                    run(level + 1)

        self.scopes.append({})
        try:
            run(0)
        finally:
            self.scopes.pop()
        return out

    def _bind_target(self, target: ast.AST, value: Any) -> None:
        if isinstance(target, ast.Name):
            self.scopes[-1][target.id] = value
        elif isinstance(target, ast.Tuple | ast.List):
            items = self._iterate(target, value)
            if len(items) != len(target.elts) or any(
                    isinstance(e, ast.Starred) for e in target.elts):
                raise _NotData(target, "unpacking of a different length")
            for t, v in zip(target.elts, items, strict=True):
                self._bind_target(t, v)
        else:
            raise _NotData(target, "a comprehension target other than names")

    def _ListComp(self, node: ast.ListComp) -> list:
        return self._comprehension(node, lambda: self(node.elt))

    def _GeneratorExp(self, node: ast.GeneratorExp) -> list:
        return self._comprehension(node, lambda: self(node.elt))

    def _SetComp(self, node: ast.SetComp) -> set:
        return set(check_hashes(self._comprehension(node, lambda: self(node.elt))))

    def _DictComp(self, node: ast.DictComp) -> dict:
        guard = KeyGuard()
        return dict(self._comprehension(
            node, lambda: (guard.add(self(node.key)), self(node.value))))


#: RETURNN's ``Config`` object, the ``config`` global of a RETURNN config.
RETURNN_CONFIG = Symbol("returnn.config.Config")


def _is_globals_call(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "globals" and not node.args and not node.keywords)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | complex) or is_numpy_scalar(value)


def _short(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


def parse_python(source: str, filename: str = "<config>") -> ast.Module:
    """``ast.parse`` of a config, every failure a ``RecipeError`` (syntax with its line, a NUL
    byte, nesting beyond ``MAX_SYNTAX_DEPTH``)."""
    if "\0" in source:
        line = source.count("\n", 0, source.index("\0")) + 1
        raise RecipeError(filename, line, "invalid Python: a NUL byte")
    _check_fstrings(source, filename)
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        raise RecipeError(filename, exc.lineno, f"invalid Python: {exc.msg}") from None
    except (RecursionError, MemoryError):
        raise RecipeError(filename, None, f"the Python syntax nests deeper than "
                                          f"{MAX_SYNTAX_DEPTH} levels (MAX_SYNTAX_DEPTH)"
                          ) from None
    _check_depth(tree, filename)
    return tree


def _check_fstrings(source: str, filename: str) -> None:
    """Refuse an f-string of more than ``MAX_FSTRING_FIELDS`` fields before ``ast.parse``
    (whose time is quadratic in them). Only a file with that many ``{`` in all is tokenized
    to look (in Python 3.11 an f-string is one token)."""
    if source.count("{") <= MAX_FSTRING_FIELDS:
        return
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type != tokenize.STRING:
                continue
            prefix = token.string[:token.string.find(token.string[-1])].lower()
            if "f" in prefix and token.string.count("{") > MAX_FSTRING_FIELDS:
                raise RecipeError(filename, token.start[0], f"an f-string with more than "
                                                            f"{MAX_FSTRING_FIELDS:,} fields "
                                                            f"(MAX_FSTRING_FIELDS)")
    except (tokenize.TokenError, SyntaxError) as exc:
        line = exc.args[1][0] if len(exc.args) > 1 and isinstance(exc.args[1], tuple) else None
        raise RecipeError(filename, getattr(exc, "lineno", None) or line,
                          f"invalid Python: {exc.args[0]}") from None


def _check_depth(tree: ast.AST, filename: str) -> None:
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_SYNTAX_DEPTH:
            raise RecipeError(filename, getattr(node, "lineno", None),
                              f"the Python syntax nests deeper than {MAX_SYNTAX_DEPTH} levels "
                              f"(MAX_SYNTAX_DEPTH)")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


def evaluate_python_config(source: str, filename: str = "<config>",
                           names: Mapping[str, Any] | Callable[[str], Any] | None = None,
                           *, partial: bool = False, file: str | None = None,
                           config_values: Mapping[str, Any] | None = None) -> PyConfig:
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
        file: keyword-only; the config's path, the value of ``__file__`` (as RETURNN runs
            a config; ``None``: ``__file__`` is undefined).
        config_values: keyword-only; names the user sets (RETURNN's command line and
            ``Config.update``): seen by ``config.bool/int/float/value/typed_value/list/has``
            lookups (``configs.returnn_lookups``; a ``Text`` value as command-line text, any
            other value typed, and then also a global of the file), and set over the file's
            own values at the end, as RETURNN sets them after loading the file.

    Returns:
        a ``PyConfig``: ``values`` (numpy arrays as lists of Python numbers, the same float64
        values) and ``unresolved``.

    Raises:
        RecipeError: the file is not Python, or builds a value beyond the bounds of
            ``trainop.configs.bounds`` (file and line named).
    """
    tree = parse_python(source, filename)
    config = PyConfig()
    lookup = names.get if isinstance(names, Mapping) else names

    def resolve(dotted: str) -> Any:
        if dotted == "__file__" and file is not None:
            return file
        if dotted == "config":  # RETURNN runs a config with its Config as `config`
            return RETURNN_CONFIG
        if lookup is None:
            return _MISSING
        value = lookup(dotted, _MISSING) if isinstance(names, Mapping) else lookup(dotted)
        return _MISSING if value is None and not isinstance(names, Mapping) else value

    given = dict(config_values or {})
    config.values.update({k: v for k, v in given.items() if not isinstance(v, Text)})
    config.reads, seen = tracked(given)
    for key in config.values:
        config.reads.given(key)
    evaluate = _Evaluator(config.values, resolve, filename, partial)
    evaluate.given = given
    evaluate.looked_up = config.looked_up
    evaluate.reads = config.reads
    try:
        for stmt in tree.body:
            _statement(stmt, evaluate, config, filename, resolve)
    except _Bound as exc:
        raise RecipeError(filename, getattr(exc.node, "lineno", None), exc.reason) from None
    except BoundExceeded as exc:
        raise RecipeError(filename, None, exc.reason) from None
    for key, value in given.items():  # set after the file ran, as RETURNN does
        _bind(config, key, final_value(value, config.values.get(key, _MISSING))
              if isinstance(value, Text) else value)
        config.reads.given(key)
    for key, value in config.values.items():
        config.values[key] = _plain(value)
    if seen is not None:
        seen.append(config)
    return config


def final_value(text: Text, assigned: Any = _MISSING) -> Any:
    """The value a name set as command-line text ends with after the file ran: RETURNN
    re-reads it in the type of the file's own value (a ``str`` stays text); otherwise the
    text's value (``text_value``)."""
    if isinstance(assigned, str):
        return str(text)
    return text_value(text)


def text_value(text: str) -> Any:
    """The value of command-line text (``--set NAME=VALUE``; RETURNN ``eval``-s it) read as
    data by this evaluator, within the same bounds as a config file's text (size, nesting,
    keys sharing a hash, work); text that is no data expression (``adam``, ``a b``, ``=``)
    stays the text. ``RecipeError`` for text beyond a bound."""
    where = "--set value"
    if len(text) > MAX_WEIGHT:
        raise RecipeError(where, None, f"text of more than {MAX_WEIGHT:,} characters "
                                       f"(MAX_WEIGHT; {len(text):,})")
    if "\0" in text:
        return str(text)
    _check_fstrings(text, where)
    try:
        tree = ast.parse(text.lstrip(" \t"), mode="eval")  # as eval() reads it
    except (SyntaxError, ValueError):
        return str(text)
    except (RecursionError, MemoryError):
        raise RecipeError(where, None, f"the Python syntax nests deeper than "
                                       f"{MAX_SYNTAX_DEPTH} levels (MAX_SYNTAX_DEPTH)") from None
    _check_depth(tree, where)
    try:
        return _plain(_Evaluator({}, lambda dotted: _MISSING, where)(tree.body))
    except _NotData:
        return str(text)
    except (_Bound, BoundExceeded) as exc:
        raise RecipeError(where, None, exc.reason) from None


def _plain(value: Any) -> Any:
    """numpy arrays and scalars as Python lists and numbers (the same values)."""
    if is_array(value) or (type(value).__module__ == "numpy" and hasattr(value, "item")):
        return value.tolist()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _bind(config: PyConfig, name: str, value: Any) -> None:
    config.values[name] = value
    config.unresolved.pop(name, None)


def _unresolve(config: PyConfig, name: str, where: Unresolved) -> None:
    config.values[name] = where
    config.unresolved[name] = where


def _assigned_names(stmts: list[ast.stmt]) -> list[str]:
    """Every top-level name the statements could bind or change: assignment targets, the
    names under item and attribute assignments (``d["k"] = v`` changes ``d``), the objects
    of method calls (``rates.append(x)`` may change ``rates``), loops, imports, defs."""
    names: list[str] = []
    for stmt in stmts:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
                names.append(node.id)
            elif isinstance(node, ast.Subscript | ast.Attribute) and isinstance(
                    node.ctx, ast.Store | ast.Del) or (isinstance(node, ast.Call) and isinstance(
                    node.func, ast.Attribute)):
                base = node.func if isinstance(node, ast.Call) else node
                while isinstance(base, ast.Subscript | ast.Attribute):
                    base = base.value
                if isinstance(base, ast.Name):
                    names.append(base.id)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.append(node.name)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                names += [a.asname or a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ExceptHandler) and node.name:
                names.append(node.name)
    return list(dict.fromkeys(names))


def _code_statement(stmt: ast.stmt, config: PyConfig, filename: str, reason: str,
                    keep: bool = False) -> None:
    """``keep``: a name may keep its value without the names read so far (an ``if`` whose
    test is not data may be data without them)."""
    line = getattr(stmt, "lineno", 0)
    where = Unresolved(filename, line, reason)
    config.unresolved[f"<line {line}>"] = where
    for name in _assigned_names([stmt]):
        _unresolve(config, name, Unresolved(filename, line, f"assigned in {reason}"))
        config.reads.assign(name, keep)


def _statement(stmt: ast.stmt, evaluate: _Evaluator, config: PyConfig, filename: str,
               resolve: Callable[[str], Any]) -> None:
    line = getattr(stmt, "lineno", 0)
    reads = config.reads
    reads.now = 0  # what this statement reads
    if isinstance(stmt, ast.Import | ast.ImportFrom):
        prefix = "" if isinstance(stmt, ast.Import) else (stmt.module or "") + "."
        for alias in stmt.names:
            if alias.name == "*":  # the names it binds are unknown: listed, never imported
                config.unresolved[f"<line {line}>"] = Unresolved(
                    filename, line, f"from {stmt.module} import *: the names it binds are not "
                                    f"known (modules are never imported)")
                continue
            dotted = prefix + alias.name
            name = alias.asname or alias.name.split(".")[0]
            target = dotted if alias.asname or isinstance(stmt, ast.ImportFrom) else name
            resolved = resolve(target)
            _bind(config, name, Symbol(target) if resolved is _MISSING else resolved)
            reads.assign(name)
        return
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        kind = "class" if isinstance(stmt, ast.ClassDef) else "function"
        _unresolve(config, stmt.name, Unresolved(
            filename, line, f"{kind} {stmt.name!r} defined in the config: code is not run; "
                            f"pass it from Python"))
        reads.assign(stmt.name)
        return
    if isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign):
        _assignment(stmt, evaluate, config, filename)
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        if stmt.value is not None and all(_plain_target(t) for t in targets):
            for name in [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]:
                reads.assign(name, keep=isinstance(stmt, ast.AugAssign))
        return
    if isinstance(stmt, ast.If):
        try:
            test = evaluate(stmt.test)
            if is_array(test):
                raise _NotData(stmt, "the truth of an array")
        except _Bound:
            raise
        except Exception as exc:  # noqa: BLE001 - _NotData, or arithmetic on data (1/0, a[9])
            reason = exc.reason if isinstance(exc, _NotData) else \
                f"{type(exc).__name__}: {_short(str(exc))}"
            _code_statement(stmt, config, filename, f"an `if` statement at line {line} whose "
                                                    f"test is not data ({reason})", keep=True)
            return
        tested, outer = reads.now, reads.control
        taken, other = (stmt.body, stmt.orelse) if test else (stmt.orelse, stmt.body)
        reads.control = outer | tested
        try:
            for inner in taken:
                _statement(inner, evaluate, config, filename, resolve)
        finally:
            reads.control = outer
        reads.now = tested
        for name in _assigned_names(other):  # kept here; the other branch may bind it
            reads.assign(name, keep=True)
        return
    if isinstance(stmt, ast.Delete) and all(isinstance(t, ast.Name) for t in stmt.targets):
        for t in stmt.targets:
            config.values.pop(t.id, None)
            config.unresolved.pop(t.id, None)
            reads.assign(t.id)
        return
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
        return  # a docstring
    if isinstance(stmt, ast.Pass):
        return
    _code_statement(stmt, config, filename, f"a {type(stmt).__name__} statement at line "
                                            f"{line} (code: not run)")


def _assignment(stmt: ast.Assign | ast.AnnAssign | ast.AugAssign, evaluate: _Evaluator,
                config: PyConfig, filename: str) -> None:
    line = stmt.lineno
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    if stmt.value is None:
        return
    if not all(_plain_target(t) for t in targets):
        _code_statement(stmt, config, filename, f"an assignment at line {line} to "
                                                f"{_short(ast.unparse(targets[0]))} (not "
                                                f"evaluated)")
        return
    names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    try:
        value = evaluate(stmt.value)
        if isinstance(stmt, ast.AugAssign):
            op = _BIN.get(type(stmt.op))
            old = config.values.get(names[0], _MISSING)
            if op is None or old is _MISSING or isinstance(old, Unresolved):
                raise _NotData(stmt, f"augmented assignment to {names[0]!r}")
            try:
                value = evaluate.built(evaluate._binary(stmt, op, old, value))
                evaluate.meter.check(value)
            except BoundExceeded as exc:
                raise _Bound(stmt, exc.reason) from None
    except _NotData as exc:
        where = Unresolved(filename, getattr(exc.node, "lineno", line), exc.reason)
        for name in names:
            _unresolve(config, name, where)
        return
    except _Bound:
        raise
    except Exception as exc:  # noqa: BLE001 - arithmetic on data (1/0, "a" - 1, a[9])
        where = Unresolved(filename, line, f"{type(exc).__name__}: {_short(str(exc))}")
        for name in names:
            _unresolve(config, name, where)
        return
    try:
        for target in targets:
            _bind_target(config, evaluate, target, value)
    except _NotData as exc:
        for name in names:
            _unresolve(config, name, Unresolved(filename, line, exc.reason))


def _plain_target(target: ast.AST) -> bool:
    """A name, or a tuple/list of plain targets (``a, b = 1, 2``)."""
    if isinstance(target, ast.Name):
        return True
    return isinstance(target, ast.Tuple | ast.List) and all(
        _plain_target(t) for t in target.elts)


def _bind_target(config: PyConfig, evaluate: _Evaluator, target: ast.AST, value: Any) -> None:
    if isinstance(target, ast.Name):
        _bind(config, target.id, value)
        return
    items = evaluate._iterate(target, value)
    if len(items) != len(target.elts):
        raise _NotData(target, f"unpacks {len(items)} values into {len(target.elts)} names")
    for t, v in zip(target.elts, items, strict=True):
        _bind_target(config, evaluate, t, v)

