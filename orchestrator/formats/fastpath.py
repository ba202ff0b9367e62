"""A fast path for the converter: plain attrs classes of JSON types, without cattrs.

``orchestrate resume`` runs once per pause, and importing cattrs and generating its hooks
is a fifth of that process's life. For the shapes the wire formats use (str, int, float,
bool, enums, ``X | None``, ``list[X]``, ``dict[str, Any]``, nested attrs classes) this
module structures and unstructures directly. It never decides that a document is wrong:
on anything unexpected it raises :class:`Unsupported`, and the cattrs converter, which
stays the single authority, takes over and either agrees or explains the error with its
JSON path. A property test holds the two to the same results.
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Callable
from typing import Any

import attrs

EXTENSION_PREFIX = "x_"


class Unsupported(Exception):
    """The fast path does not handle this value or class; use the converter."""


Convert = Callable[[Any], Any]


@attrs.frozen
class _Plan:
    fields: tuple[tuple[str, Convert, bool], ...]  # name, convert, required
    names: frozenset[str]
    open_object: bool  # unknown keys are kept in an ``extra`` dict field
    order: tuple[str, ...]  # field names in declaration order
    build: Convert  # data -> instance: the steps above, as one function made for the class


_plans: dict[type, _Plan | None] = {}


def structure(data: Any, cls: type[Any]) -> Any:
    """``data`` structured into the attrs class ``cls``; :class:`Unsupported` otherwise."""
    plan = _plans.get(cls) or _plan_for(cls)
    if plan is None:
        raise Unsupported(cls)
    return plan.build(data)


def unstructure(obj: Any) -> Any:
    """The JSON form of ``obj`` (attrs instances as dicts without ``None`` fields)."""
    kind = type(obj)
    if kind in (str, int, float, bool) or obj is None:
        return obj
    if kind is dict:
        return {key: unstructure(value) for key, value in obj.items()}
    if kind is list or isinstance(obj, list):  # a SettledItems too
        return [unstructure(item) for item in obj]
    if isinstance(obj, enum.Enum):
        return obj.value
    if attrs.has(kind) and _plan_for(kind) is not None:
        data = {}
        for field in attrs.fields(kind):
            value = getattr(obj, field.name)
            if value is not None:
                data[field.name] = unstructure(value)
        if "extra" in data:
            data.update(data.pop("extra"))
        return data
    raise Unsupported(kind)


def shallow(obj: Any) -> Any:
    """One level of :func:`unstructure`, as a JSON encoder's ``default`` hook.

    The C encoder walks the containers itself and calls back only for attrs instances
    and enums, so saving a large state costs little more than ``json.dumps``.
    """
    if isinstance(obj, enum.Enum):
        return obj.value
    plan = _plans.get(type(obj)) or (_plan_for(type(obj)) if attrs.has(type(obj)) else None)
    if plan is not None:
        data = {}
        for name in plan.order:
            value = getattr(obj, name)
            if value is not None:
                data[name] = value
        if plan.open_object and "extra" in data:
            data.update(data.pop("extra"))
        return data
    raise TypeError(f"{type(obj).__name__} is not handled by the fast path")


def _structure_with(plan: _Plan, cls: type[Any], data: Any) -> Any:
    if type(data) is not dict:
        raise Unsupported(cls)
    names = plan.names
    extra: dict[str, Any] = {}
    for key in data:
        if key not in names or key == "extra":
            if plan.open_object:
                extra[key] = data[key]
            elif not key.startswith(EXTENSION_PREFIX):
                raise Unsupported(key)  # the converter names the unknown field
    kwargs: dict[str, Any] = {}
    for name, convert, required in plan.fields:
        if name == "extra" and plan.open_object:
            kwargs[name] = extra
        elif name in data:
            kwargs[name] = convert(data[name])
        elif required:
            raise Unsupported(name)
    return cls(**kwargs)


def _plan_for(cls: type[Any]) -> _Plan | None:
    if cls in _plans:
        return _plans[cls]
    _plans[cls] = None  # a class that refers to itself is left to the converter
    try:
        attrs.resolve_types(cls)
        fields = attrs.fields(cls)
        steps = []
        for field in fields:
            if not field.init or field.alias != field.name:
                raise Unsupported(field.name)
            required = field.default is attrs.NOTHING
            steps.append((field.name, _converter_for(field.type), required))
        names = frozenset(f.name for f in fields)
        order = tuple(f.name for f in fields)
        open_object = "extra" in names
        build = _generic_builder(cls) if open_object else _closed_builder(cls, fields, names)
        plan: _Plan | None = _Plan(tuple(steps), names, open_object, order, build)
    except (Unsupported, NameError, TypeError):
        plan = None
    _plans[cls] = plan
    return plan


def _generic_builder(cls: type[Any]) -> Convert:
    def build(data: Any) -> Any:
        plan = _plans[cls]
        assert plan is not None
        return _structure_with(plan, cls, data)

    return build


def _closed_builder(cls: type[Any], fields: Any, names: frozenset[str]) -> Convert:
    """One function that structures ``cls`` as :func:`_structure_with` does, written out
    field by field: a long run's state holds thousands of records, and a generic loop
    over each one's fields was most of the cost of reading it back."""
    scope: dict[str, Any] = {
        "cls": cls,
        "names": names,
        "Unsupported": Unsupported,
        "check_keys": _check_keys,
        "new": object.__new__,
    }
    lines = [
        "def build(data):",
        "    if type(data) is not dict:",
        "        raise Unsupported(cls)",
        "    if not names.issuperset(data):",
        "        check_keys(data, names)",
    ]
    setters = _slot_setters(cls, fields)
    lines.append("    kwargs = {}" if setters is None else "    made = new(cls)")
    for index, field in enumerate(fields):
        converted = _conversion(field, index, scope)
        if setters is not None:  # each value set in its slot, as __init__ would
            scope[f"s{index}"] = setters[index]
            converted = [line.replace(f"kwargs[{field.name!r}] = ", "v = ") for line in converted]
            converted.append(f"s{index}(made, v)")
        lines += _field_lines(field, index, converted, scope, slots=setters is not None)
    lines.append("    return cls(**kwargs)" if setters is None else "    return made")
    exec("\n".join(lines), scope)
    return scope["build"]  # type: ignore[no-any-return]


def _conversion(field: Any, index: int, scope: dict[str, Any]) -> list[str]:
    """The lines of :func:`_closed_builder`'s function that check and convert the value of
    ``field`` (the ``index``-th, read as ``v<index>``) into ``kwargs``; what they name is
    put into ``scope``."""
    name = field.name
    value = f"v{index}"
    exact = _EXACT.get(field.type)
    optional = _EXACT.get(_optional_of(field.type))
    if exact is not None:
        scope[f"t{index}"] = exact
        return [
            f"if type({value}) is not t{index}:",
            f"    raise Unsupported(t{index})",
            f"kwargs[{name!r}] = {value}",
        ]
    if optional is not None:  # ``str | None`` and the like, without a call
        scope[f"t{index}"] = optional
        return [
            f"if {value} is not None and type({value}) is not t{index}:",
            f"    raise Unsupported(t{index})",
            f"kwargs[{name!r}] = {value}",
        ]
    if (record := _record_class(field.type)) is not None:
        # A nested record (or ``None``, where the field may be): its builder called
        # straight, without the converter's closures around it.
        scope["structure"] = structure
        scope[f"k{index}"] = record
        call = f"structure({value}, k{index})"
        if field.type is not record:
            call = f"None if {value} is None else {call}"
        return [f"kwargs[{name!r}] = {call}"]
    if _optional_of(field.type) == dict[str, Any]:
        return [
            f"if {value} is not None and type({value}) is not dict:",
            "    raise Unsupported(dict)",
            f"kwargs[{name!r}] = None if {value} is None else dict({value})",
        ]
    if isinstance(field.type, type) and issubclass(field.type, enum.Enum):
        # A member found by its text without a call; anything else takes the call.
        scope[f"m{index}"] = {m.value: m for m in field.type if type(m.value) is str}
        scope[f"c{index}"] = _converter_for(field.type)
        return [
            f"m = m{index}.get({value}) if type({value}) is str else None",
            f"kwargs[{name!r}] = c{index}({value}) if m is None else m",
        ]
    scope[f"c{index}"] = _converter_for(field.type)
    return [f"kwargs[{name!r}] = c{index}({value})"]


def _field_lines(
    field: Any, index: int, converted: list[str], scope: dict[str, Any], *, slots: bool
) -> list[str]:
    """The lines of :func:`_closed_builder`'s function for ``field``: its value read from
    the data (refused when a required one is missing), then ``converted``; with ``slots``
    (values set in their slots), an absent field's default set."""
    name = field.name
    value = f"v{index}"
    if field.default is attrs.NOTHING:
        lines = [f"    if {name!r} not in data:", f"        raise Unsupported({name!r})"]
        return lines + [f"    {value} = data[{name!r}]"] + [f"    {line}" for line in converted]
    lines = [f"    if {name!r} in data:", f"        {value} = data[{name!r}]"]
    lines += [f"        {line}" for line in converted]
    if slots:
        default = field.default
        if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            scope[f"f{index}"] = default.factory
            lines += ["    else:", f"        s{index}(made, f{index}())"]
        else:
            scope[f"d{index}"] = default
            lines += ["    else:", f"        s{index}(made, d{index})"]
    return lines


def _slot_setters(cls: type[Any], fields: Any) -> list[Callable[[Any, Any], None]] | None:
    """Each field's slot setter, when an instance may be made by setting its slots one by
    one, as attrs' own ``__init__`` does (without the call and its keyword dict: a long
    run's state holds thousands of records): a slotted class whose ``__init__`` does
    nothing else (no validator, converter, factory taking the instance, hook or cached
    hash). ``None`` otherwise: the instance is made by calling the class."""
    hooks = ("__attrs_pre_init__", "__attrs_post_init__", "__attrs_init__")
    if any(hasattr(cls, hook) for hook in hooks) or "__dict__" in dir(cls):
        return None
    if "_attrs_cached_hash" in getattr(cls, "__slots__", ()):
        return None
    setters = []
    for field in fields:
        default = field.default
        factory = isinstance(default, attrs.Factory)  # type: ignore[arg-type]
        if field.validator is not None or field.converter is not None:
            return None
        if factory and default.takes_self:
            return None
        slot = getattr(cls, field.name, None)
        if not isinstance(slot, types.MemberDescriptorType):
            return None
        setters.append(slot.__set__)
    return setters


def _record_class(kind: Any) -> type[Any] | None:
    """The attrs class of a field of type ``X`` or ``X | None``; ``None`` for any other."""
    inner = _optional_of(kind)
    target = kind if inner is None else inner
    return target if isinstance(target, type) and attrs.has(target) else None


def _optional_of(kind: Any) -> Any:
    """``X`` of ``X | None`` (``Optional[X]``); ``None`` for any other type."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        args = typing.get_args(kind)
        if len(args) == 2 and type(None) in args:
            return next(a for a in args if a is not type(None))
    return None


def _check_keys(data: dict[str, Any], names: frozenset[str]) -> None:
    for key in data:
        if key not in names and not key.startswith(EXTENSION_PREFIX):
            raise Unsupported(key)  # the converter names the unknown field


_EXACT: dict[Any, type] = {str: str, int: int, bool: bool}


def _converter_for(kind: Any) -> Convert:
    if kind is str:
        return _exact(str)
    if kind is int:
        return _exact(int)
    if kind is bool:
        return _exact(bool)
    if kind is float:
        return _number
    if kind is Any:
        return _same
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return _enum(kind)
    optional = _optional_of(kind)
    if optional is not None:
        inner = _converter_for(optional)
        return lambda value: None if value is None else inner(value)
    origin = typing.get_origin(kind)
    args = typing.get_args(kind)
    if origin is list and len(args) == 1:
        return _list(_converter_for(args[0]))
    if origin is dict and args == (str, Any):
        return _dict
    if isinstance(kind, type) and attrs.has(kind):
        return lambda value: structure(value, kind)
    raise Unsupported(kind)


def _exact(kind: type) -> Convert:
    def convert(value: Any) -> Any:
        if type(value) is not kind:
            raise Unsupported(kind)
        return value

    return convert


def _number(value: Any) -> float:
    if type(value) is float:
        return value
    if type(value) is int:
        return float(value)
    raise Unsupported(float)


def _same(value: Any) -> Any:
    return value


def _enum(kind: type[enum.Enum]) -> Convert:
    # The lookup ``kind(value)`` starts with, without its call: a long run's thousand
    # statuses are read at every load. Anything not found there takes the call.
    members = {member.value: member for member in kind}

    def convert(value: Any) -> Any:
        try:
            return members[value]
        except (KeyError, TypeError):
            pass
        try:
            return kind(value)
        except (ValueError, TypeError):
            raise Unsupported(kind) from None

    return convert


def _list(inner: Convert) -> Convert:
    def convert(value: Any) -> list[Any]:
        if type(value) is not list:
            raise Unsupported(list)
        return [inner(item) for item in value]

    return convert


def _dict(value: Any) -> dict[str, Any]:
    if type(value) is not dict:
        raise Unsupported(dict)
    return dict(value)
