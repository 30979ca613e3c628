"""Payloads at handler time: JSON values -> the types the handler's annotations ask for.

A task resolves its handler's annotations once and keeps a converter for each argument that
needs one (a datetime, a list of dataclasses...); arguments of JSON's own types get none, and a
task with none never comes here. The converters themselves are in ``converters.py``;
``payload.py`` is the other half: it writes these types as JSON.
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
from collections.abc import Callable, Mapping
from datetime import date
from typing import Any

from .converters import (
    SCALARS,
    Converter,
    enum_of,
    first_of,
    fixed_tuple,
    mapping,
    model_of,
    sequence,
    tuple_of,
)
from .errors import PayloadError
from .payload import _BadValue, short

logger = logging.getLogger("cronbase")

# Annotations JSON already satisfies: their arguments get no converter.
_JSON_TYPES: frozenset[object] = frozenset(
    {Any, object, int, float, str, bool, list, dict, type(None), None}
)
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


class Unresolved(Exception):
    """An annotation names something not defined (yet): a forward reference, a TYPE_CHECKING
    import. Internal, never seen by users: Task.__init__ catches it (and resolves again on the
    first job), and the lenient build of that first job logs it instead of raising."""


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
    func: Callable[..., object], *, lenient: bool
) -> dict[str, Converter] | None:
    """A converter for each argument of ``func`` whose annotation asks for more than JSON;
    None when no argument does.

    Annotations are evaluated one by one, so one that cannot be (a name imported only under
    TYPE_CHECKING) spoils only its own argument: Unresolved, or with ``lenient`` a warning and
    that argument handed over as JSON, as before cronbase converted anything.
    """
    target = inspect.unwrap(func)
    globalns = getattr(target, "__globals__", None)
    if globalns is None:  # a callable object: its class's module
        globalns = _module_namespace(getattr(target, "__module__", None))
    build = _Builder(lenient, f"task handler {getattr(func, '__qualname__', func)!r}")
    converters: dict[str, Converter] = {}
    for param in inspect.signature(func).parameters.values():
        if param.annotation is param.empty or param.kind not in (
            param.POSITIONAL_OR_KEYWORD,
            param.KEYWORD_ONLY,
        ):
            continue
        try:
            convert = build.converter(_evaluate(param.annotation, globalns, {}))
        except Unresolved as exc:
            if not lenient:
                raise
            build.skip(f"argument {param.name!r}", exc)
            continue
        except Exception as exc:  # an annotation too exotic to read: never fail registration
            build.skip(f"argument {param.name!r}", Unresolved(f"{type(exc).__name__}: {exc}"))
            continue
        if convert is not None:
            converters[param.name] = convert
    return converters or None


def convert_arguments(
    task: str, converters: Mapping[str, Converter], kwargs: dict[str, Any]
) -> None:
    """Turn ``kwargs`` (in place) into the handler's types; PayloadError naming the argument."""
    for name, convert in converters.items():
        if name not in kwargs:
            continue
        value = kwargs[name]
        try:
            kwargs[name] = convert(value)
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


class _Builder:
    """Builds converters for one handler; memoises dataclasses (they may refer to themselves)."""

    def __init__(self, lenient: bool, owner: str) -> None:
        self.lenient = lenient
        self.owner = owner
        self.memo: dict[type, Converter] = {}

    def skip(self, what: str, exc: Unresolved) -> None:
        logger.warning(
            "%s: cannot resolve the annotation of %s, %s; it is passed as JSON, unconverted "
            "(define or import the name at module level)",
            self.owner,
            what,
            exc,
        )

    def converter(self, tp: Any) -> Converter | None:
        """None when JSON values already are ``tp`` (or cronbase cannot make one: passed as is)."""
        try:
            if tp in _JSON_TYPES or isinstance(tp, typing.TypeVar):
                return None
        except TypeError:  # an unhashable annotation (x: [int]) is nothing cronbase can make
            return None
        supertype = getattr(tp, "__supertype__", None)  # typing.NewType
        if supertype is not None:
            return self.converter(supertype)
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin is typing.Literal:
            return None
        if origin is typing.Union or origin is types.UnionType:
            return self._union(args)
        if origin in _SEQUENCES:
            item = self.converter(args[0]) if args else None
            return None if item is None else sequence(item)
        if origin is tuple or tp is tuple:
            return self._tuple(args)
        if origin in _MAPPINGS:
            value = self.converter(args[1]) if len(args) == 2 else None
            return None if value is None else mapping(value)
        if not isinstance(tp, type):
            return None
        scalar = SCALARS.get(tp)
        if scalar is not None:
            return scalar
        if issubclass(tp, enum.Enum):
            return enum_of(tp)
        if dataclasses.is_dataclass(tp):
            return self._dataclass(tp)
        pydantic = sys.modules.get("pydantic")
        if pydantic is not None and issubclass(tp, pydantic.BaseModel):
            return model_of(tp)
        return None

    def _union(self, args: tuple[Any, ...]) -> Converter | None:
        members = [a for a in args if a is not type(None)]
        if len(members) == 1:  # Optional[X]: None passes every converter anyway
            return self.converter(members[0])
        rich: list[Converter] = []
        plain: list[type] = []
        # date last: it takes a datetime at midnight, which `date | datetime` means to keep.
        for member in sorted(members, key=lambda m: m is date):
            convert = self.converter(member)
            if convert is not None:
                rich.append(convert)
                continue
            if member is Any or member is object:
                return None  # anything goes
            if typing.get_origin(member) is typing.Literal:
                plain.extend(type(v) for v in typing.get_args(member))
            else:
                kind = typing.get_origin(member) or member
                plain.extend([kind, int] if kind is float else [kind])
        if not rich:
            return None
        names = " | ".join(getattr(m, "__name__", str(m)) for m in members)
        return first_of(tuple(t for t in plain if isinstance(t, type)), rich, names)

    def _tuple(self, args: tuple[Any, ...]) -> Converter:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple_of(self.converter(args[0]))
        if not args:
            return tuple_of(None)
        if args == ((),):
            return fixed_tuple(())
        return fixed_tuple(tuple(self.converter(a) for a in args))

    def _dataclass(self, cls: type) -> Converter:
        known = self.memo.get(cls)
        if known is not None:
            return known
        convs: dict[str, Converter | None] = {}
        fields = dataclasses.fields(cls)
        init = frozenset(f.name for f in fields if f.init)
        computed = frozenset(f.name for f in fields if not f.init)
        name = cls.__name__

        def convert(value: Any) -> Any:
            if value is None or isinstance(value, cls):
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
                field_convert = convs.get(key)
                try:
                    kwargs[key] = item if field_convert is None else field_convert(item)
                except _BadValue as exc:
                    raise exc.at(f"[{key!r}]") from None
            try:
                return cls(**kwargs)
            except TypeError as exc:  # a field missing
                raise _BadValue(f"does not make a {name}: {exc}") from None

        self.memo[cls] = convert
        module = _module_namespace(cls.__module__)
        for field in fields:
            if not field.init:
                continue
            try:
                convs[field.name] = self.converter(_evaluate(field.type, module, vars(cls)))
            except Unresolved as exc:
                if not self.lenient:
                    raise
                self.skip(f"{name}.{field.name}", exc)
        return convert
