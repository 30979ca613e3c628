"""Payloads against the handler's annotations: JSON values -> the types they ask for, checked.

A task resolves its handler's annotations once into :class:`Conversions`: for each annotated
argument, a converter (``converters.py``: a datetime from ISO text, a list of dataclasses; for
JSON's own types a check, an ``int`` is no ``"12"``) and the exact types that pass without a
call. Arguments that are unannotated or ``Any`` get none, and a task with none never comes here.
The worker converts the stored payload (:func:`convert_arguments`); a defer checks the stored
form of each value with the same converters (:func:`check_arguments`), so what a defer accepts
converts at run time, and what it refuses would not. ``payload.py`` is the other half: it writes
these types as JSON.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import inspect
import logging
import sys
import types
import typing
from collections.abc import Callable, Collection, Mapping
from datetime import date
from typing import Any

from .converters import (
    CHECKS,
    KEPT,
    NONE,
    SCALARS,
    Converter,
    enum_of,
    first_of,
    fixed_tuple,
    literal,
    mapping,
    model_of,
    sequence,
    tuple_of,
)
from .errors import PayloadError
from .payload import _BadValue, short, stored_form

logger = logging.getLogger("cronbase")

# Annotations any JSON value satisfies: their arguments get no converter.
_ANYTHING: frozenset[object] = frozenset({Any, object})
_SEQUENCES = frozenset(
    {
        list,
        collections.abc.Sequence,
        collections.abc.MutableSequence,
        collections.abc.Collection,
        collections.abc.Iterable,
    }
)
_MAPPINGS = frozenset({dict, collections.abc.Mapping, collections.abc.MutableMapping})
# Values a defer checks as they are: encode_payload stores them unchanged.
_STORED_AS_IS = frozenset({int, float, str, bool, NONE})
_NONE_ONLY = frozenset({NONE})


class _Built(typing.NamedTuple):
    """A converter; the exact types of stored (JSON) values it returns unchanged, checked
    without a call on the worker; and the exact types of Python values whose stored form it
    always takes, accepted without the round trip at defer time (a ``date`` for ``date``)."""

    convert: Converter
    passes: frozenset[type]
    keeps: frozenset[type]


def _checked(check: tuple[Converter, frozenset[type]]) -> _Built:
    return _Built(check[0], check[1], check[1])


def _converting(convert: Converter, keeps: frozenset[type] = _NONE_ONLY) -> _Built:
    return _Built(convert, _NONE_ONLY, keeps)


class Unresolved(Exception):
    """An annotation names something not defined (yet): a forward reference, a TYPE_CHECKING
    import. Internal, never seen by users: Task.__init__ catches it (and resolves again on the
    first defer or job), and the lenient build then logs it instead of raising."""


@dataclasses.dataclass(frozen=True, slots=True)
class Conversions:
    """A handler's checked arguments, built once per task: for each annotated one, its name, the
    exact types that pass without a call (stored values on the worker: ``at_run``; Python values
    at defer time: ``at_defer``) and its converter; ``rest`` for the keys ``**kwargs: X`` takes
    (``names``: the keys that are not its)."""

    at_run: tuple[tuple[str, frozenset[type], Converter], ...]
    at_defer: tuple[tuple[str, frozenset[type], Converter], ...] = ()
    rest: _Built | None = None
    names: frozenset[str] = frozenset()

    @property
    def arguments(self) -> list[str]:
        """The names of the checked arguments, in the handler's order."""
        return [name for name, _, _ in self.at_run]


_ABSENT = object()


# -- resolving annotations -------------------------------------------------------------------


class _One:
    """What typing.get_type_hints reads: one annotation, evaluated in a given namespace."""

    def __init__(self, annotation: object) -> None:
        self.__annotations__ = {"value": annotation}


def _evaluate(annotation: object, globalns: dict[str, Any], localns: Mapping[str, Any]) -> Any:
    try:
        return typing.get_type_hints(_One(annotation), globalns, dict(localns))["value"]
    except Exception as exc:  # NameError mostly; a bad string gives SyntaxError
        raise Unresolved(f"{short(annotation)} ({type(exc).__name__}: {exc})") from None


def _module_namespace(name: str | None) -> dict[str, Any]:
    module = sys.modules.get(name or "")
    return vars(module) if module is not None else {}


def argument_converters(
    func: Callable[..., object], *, lenient: bool, skip: Collection[str] = ()
) -> Conversions | None:
    """The checks and conversions of ``func``'s annotated arguments (but those in ``skip``,
    which the caller handles); None when every argument takes any JSON value.

    Annotations are evaluated one by one, so one that cannot be (a name imported only under
    TYPE_CHECKING) spoils only its own argument: Unresolved, or with ``lenient`` a warning and
    that argument handed over as JSON, as before cronbase converted anything.
    """
    target = inspect.unwrap(func)
    globalns = getattr(target, "__globals__", None)
    if globalns is None:  # a callable object: its class's module
        globalns = _module_namespace(getattr(target, "__module__", None))
    build = _Builder(lenient, f"task handler {getattr(func, '__qualname__', func)!r}")
    named: list[tuple[str, _Built]] = []
    rest: _Built | None = None
    params = inspect.signature(func).parameters.values()
    for param in params:
        if param.annotation is param.empty or param.name in skip:
            continue
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY, param.VAR_KEYWORD):
            continue
        try:
            built = build.converter(_evaluate(param.annotation, globalns, {}))
        except Unresolved as exc:
            if not lenient:
                raise
            build.skip(f"argument {param.name!r}", exc)
            continue
        except Exception as exc:  # an annotation too exotic to read: never fail registration
            build.skip(f"argument {param.name!r}", Unresolved(f"{type(exc).__name__}: {exc}"))
            continue
        if built is None:
            continue
        if param.kind is param.VAR_KEYWORD:
            rest = built
        else:
            named.append((param.name, built))
    if not named and rest is None:
        return None
    names = frozenset(p.name for p in params if p.kind is not p.VAR_KEYWORD) | frozenset(skip)
    return Conversions(
        at_run=tuple((name, built.passes, built.convert) for name, built in named),
        at_defer=tuple((name, built.keeps, built.convert) for name, built in named),
        rest=rest,
        names=names,
    )


def _converted(task: str, name: str, convert: Converter, value: object) -> Any:
    try:
        return convert(value)
    except _BadValue as exc:
        raise PayloadError(
            f"payload for task {task!r} does not convert to argument {name!r}: "
            f"{exc.at(f'[{name!r}]').describe()}"
        ) from None
    except Exception as exc:  # a dataclass's __post_init__, a model validator: user code
        raise PayloadError(
            f"payload for task {task!r} does not convert to argument {name!r}: "
            f"{short(value)} raised {type(exc).__name__}: {exc}"
        ) from None


def convert_arguments(task: str, conversions: Conversions, kwargs: dict[str, Any]) -> None:
    """Turn ``kwargs`` (in place) into the handler's types; PayloadError naming the argument."""
    for name, passes, convert in conversions.at_run:
        value = kwargs.get(name, _ABSENT)
        if type(value) not in passes and value is not _ABSENT:
            kwargs[name] = _converted(task, name, convert, value)
    rest = conversions.rest
    if rest is not None:
        for name, value in list(kwargs.items()):
            if name not in conversions.names and type(value) not in rest.passes:
                kwargs[name] = _converted(task, name, rest.convert, value)


def check_arguments(
    task: str, conversions: Conversions, payload: Mapping[str, Any], skip: str | None = None
) -> None:
    """At defer time: PayloadError, as :func:`convert_arguments` would raise it on the worker,
    for a value that would not convert. Each is checked as it will be stored (a ``date`` as its
    ISO text, a dataclass as an object), so the two agree; ``skip``: a key filled in later (a
    workflow's received result)."""
    for name, keeps, convert in conversions.at_defer:
        value = payload.get(name, _ABSENT)
        if type(value) not in keeps and value is not _ABSENT and name != skip:
            _check(task, name, convert, value)
    rest = conversions.rest
    if rest is not None:
        for name, value in payload.items():
            if name not in conversions.names and name != skip and type(value) not in rest.keeps:
                _check(task, name, rest.convert, value)


def _check(task: str, name: str, convert: Converter, value: object) -> None:
    stored = value if type(value) in _STORED_AS_IS else stored_form(task, name, value)
    _converted(task, name, convert, stored)


class _Builder:
    """Builds converters for one handler; memoises dataclasses (they may refer to themselves)."""

    def __init__(self, lenient: bool, owner: str) -> None:
        self.lenient = lenient
        self.owner = owner
        self.memo: dict[type, _Built] = {}

    def skip(self, what: str, exc: Unresolved) -> None:
        logger.warning(
            "%s: cannot resolve the annotation of %s, %s; it is passed as JSON, unconverted "
            "(define or import the name at module level)",
            self.owner,
            what,
            exc,
        )

    def converter(self, tp: Any) -> _Built | None:
        """``tp``'s converter and the exact types it keeps as they are; None when any JSON value
        is a ``tp`` (Any, object), or cronbase cannot tell (a class of its own: passed as is)."""
        try:
            if tp in _ANYTHING or isinstance(tp, typing.TypeVar):
                return None
            check = CHECKS.get(tp)
        except TypeError:  # an unhashable annotation (x: [int]) is nothing cronbase can make
            return None
        if check is not None:
            return _checked(check)
        supertype = getattr(tp, "__supertype__", None)  # typing.NewType
        if supertype is not None:
            return self.converter(supertype)
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin is typing.Literal:
            return self._literal(args)
        if origin is typing.Union or origin is types.UnionType:
            return self._union(args)
        if origin in _SEQUENCES:
            item = self.converter(args[0]) if args else None
            if item is None:
                return _checked(CHECKS[list])
            return _converting(sequence(item.convert, item.passes))
        if origin is tuple or tp is tuple:
            return _converting(self._tuple(args))
        if origin in _MAPPINGS:
            value = self.converter(args[1]) if len(args) == 2 else None
            if value is None:
                return _checked(CHECKS[dict])
            return _converting(mapping(value.convert, value.passes))
        if not isinstance(tp, type):
            return None
        scalar = SCALARS.get(tp)
        if scalar is not None:
            return _converting(scalar, KEPT.get(tp, _NONE_ONLY))
        if issubclass(tp, enum.Enum):
            return _converting(enum_of(tp))
        if dataclasses.is_dataclass(tp):
            return self._dataclass(tp)
        pydantic = sys.modules.get("pydantic")
        if pydantic is not None and issubclass(tp, pydantic.BaseModel):
            return _converting(model_of(tp))
        return None

    def _literal(self, values: tuple[Any, ...]) -> _Built | None:
        if not all(type(v) in _STORED_AS_IS for v in values):
            return None  # an Enum member among them: passed as JSON writes it, unchecked
        return _Built(literal(values), _NONE_ONLY, _NONE_ONLY)

    def _union(self, args: tuple[Any, ...]) -> _Built | None:
        members = [a for a in args if a is not NONE]  # None passes every converter
        built: list[tuple[int, _Built]] = []
        for member in members:
            one = self.converter(member)
            if one is None:
                return None  # anything goes
            # JSON's own types first (``str | date`` keeps a string a string), date last: it
            # takes a datetime at midnight, which `date | datetime` means to keep.
            rank = 0 if CHECKS.get(member) or typing.get_origin(member) is typing.Literal else 1
            built.append((2 if member is date else rank, one))
        built.sort(key=lambda ranked: ranked[0])
        # A value one member keeps as it is, the union keeps: JSON's own types are tried first.
        passes = frozenset[type]().union(*(one.passes for _, one in built))
        keeps = frozenset[type]().union(*(one.keeps for _, one in built))
        if len(built) == 1:
            convert = built[0][1].convert
        else:
            names = " | ".join(getattr(m, "__name__", str(m)) for m in members)
            convert = first_of([one.convert for _, one in built], names)
        return _Built(convert, passes, keeps)

    def _tuple(self, args: tuple[Any, ...]) -> Converter:
        if len(args) == 2 and args[1] is Ellipsis:
            item = self.converter(args[0])
            return tuple_of(None if item is None else item.convert)
        if not args:
            return tuple_of(None)
        if args == ((),):
            return fixed_tuple(())
        return fixed_tuple(
            tuple(None if (one := self.converter(a)) is None else one.convert for a in args)
        )

    def _dataclass(self, cls: type) -> _Built:
        known = self.memo.get(cls)
        if known is not None:
            return known
        convs: dict[str, _Built] = {}
        fields = dataclasses.fields(cls)
        init = frozenset(f.name for f in fields if f.init)
        computed = frozenset(f.name for f in fields if not f.init)
        name = cls.__name__

        def convert(value: Any) -> Any:
            if isinstance(value, cls):
                return value
            if not isinstance(value, dict):
                raise _BadValue(f"is {short(value)}, not an object for {name}")
            kwargs: dict[str, Any] = {}
            for key, item in value.items():
                if key not in init:
                    if key in computed:
                        continue  # an init=False field: the class computes it again
                    raise _BadValue(
                        f"has the key {short(key)}, which {name} does not take "
                        f"(fields: {', '.join(sorted(init)) or 'none'})"
                    )
                field = convs.get(key)
                try:
                    if field is None or type(item) in field.passes:
                        kwargs[key] = item
                    else:
                        kwargs[key] = field.convert(item)
                except _BadValue as exc:
                    raise exc.at(f"[{key!r}]") from None
            try:
                return cls(**kwargs)
            except TypeError as exc:  # a field missing
                raise _BadValue(f"does not make a {name}: {exc}") from None

        self.memo[cls] = built = _converting(convert)
        module = _module_namespace(cls.__module__)
        for field in fields:
            if not field.init:
                continue
            try:
                one = self.converter(_evaluate(field.type, module, vars(cls)))
            except Unresolved as exc:
                if not self.lenient:
                    raise
                self.skip(f"{name}.{field.name}", exc)
                continue
            if one is not None:
                convs[field.name] = one
        return built
