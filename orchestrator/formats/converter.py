"""The one cattrs converter for every wire format, with path-precise errors.

Structuring is strict: a key the contract does not name is refused unless it carries the
``x_`` extension prefix (then it is ignored), a wrong type names its JSON path, and the
JSON type is checked before anything is built. Unstructuring omits ``None`` fields,
because the formats' schemas forbid nulls. Imported only when the fast path
(:mod:`orchestrator.formats.fastpath`) steps aside: cattrs is not free to import.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn

from .._errors import ContractError

EXTENSION_PREFIX = "x_"


def _open_map_hook(cls: type[Any], converter: cattrs.Converter) -> Callable[[Any, Any], Any]:
    """Structure hook for attrs classes: refuse unknown keys, ignore ``x_`` extensions.

    A class with an ``extra`` dict field (an open object in the schema) keeps unknown
    keys there instead.
    """
    inner = make_dict_structure_fn(cls, converter)
    names = frozenset(a.name for a in attrs.fields(cls))
    open_object = "extra" in names

    def structure(value: Any, _: Any) -> Any:
        if not isinstance(value, dict):
            raise TypeError(f"expected a JSON object, got {_json_type(value)}")
        unknown = [key for key in value if key not in names or key == "extra"]
        if unknown:
            if open_object:
                known = {k: v for k, v in value.items() if k in names and k != "extra"}
                known["extra"] = {k: value[k] for k in unknown}
                return inner(known, cls)
            undeclared = [k for k in unknown if not k.startswith(EXTENSION_PREFIX)]
            value = {k: v for k, v in value.items() if k in names}
            if undeclared:  # named together with what else is wrong in the declared ones
                try:
                    inner(value, cls)
                except Exception as exc:
                    raise _UnknownKeys(undeclared, also=exc) from None
                raise _UnknownKeys(undeclared)
        return inner(value, cls)

    return structure


def _drop_none_hook(cls: type[Any], converter: cattrs.Converter) -> Callable[[Any], Any]:
    inner = make_dict_unstructure_fn(cls, converter)
    has_extra = any(a.name == "extra" for a in attrs.fields(cls))

    def unstructure(obj: Any) -> dict[str, Any]:
        data: dict[str, Any] = {k: v for k, v in inner(obj).items() if v is not None}
        if has_extra:
            data.update(data.pop("extra", {}))
        return data

    return unstructure


class _UnknownKeys(Exception):
    def __init__(self, keys: list[str], also: BaseException | None = None) -> None:
        self.keys = keys
        self.also = also  # what failed in the declared keys of the same object
        super().__init__(", ".join(keys))


def _strict_int(value: Any, _: Any) -> int:
    # JSON Schema's "integer": bool is not an integer, and neither is 1.5.
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer() and not isinstance(value, bool):
            return int(value)
        raise TypeError(f"expected an integer, got {_json_type(value)}")
    return value


def _strict_float(value: Any, _: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"expected a number, got {_json_type(value)}")
    return float(value)


def _strict_str(value: Any, _: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {_json_type(value)}")
    return value


def _strict_bool(value: Any, _: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected true or false, got {_json_type(value)}")
    return value


class _NotOneOf(ValueError):
    """A value that is none of an enumeration's: the message lists the ones it may be."""

    def __init__(self, value: Any, kind: type[enum.Enum]) -> None:
        allowed = [member.value for member in kind]
        folded = [
            v for v in allowed if isinstance(v, str) and str(value).casefold() == v.casefold()
        ]
        hint = f" (did you mean {folded[0]!r}?)" if folded else ""
        shown = ", ".join(repr(v) for v in allowed)
        super().__init__(f"{value!r} is not one of {shown}{hint}")


def _is_enum_type(cls: Any) -> bool:
    return isinstance(cls, type) and issubclass(cls, enum.Enum)


def _enum_hook(kind: type[enum.Enum]) -> Callable[[Any, Any], Any]:
    def structure(value: Any, _: Any) -> Any:
        try:
            return kind(value)
        except ValueError:
            raise _NotOneOf(value, kind) from None

    return structure


class _AtIndex(Exception):
    """A failure inside a list item or an object member, with where it happened."""

    def __init__(self, step: str, cause: BaseException) -> None:
        self.step = step
        self.cause = cause
        super().__init__(f"{step}: {cause}")


class _Several(Exception):
    """Failures in several items of one list or members of one object."""

    def __init__(self, failures: list[_AtIndex]) -> None:
        self.failures = failures
        super().__init__("; ".join(map(str, failures)))


def _is_list_type(cls: Any) -> bool:
    return getattr(cls, "__origin__", None) is list


def _is_dict_type(cls: Any) -> bool:
    return cls is dict or getattr(cls, "__origin__", None) is dict


def _list_hook(cls: Any, converter: cattrs.Converter) -> Callable[[Any, Any], Any]:
    # cattrs builds a list by iterating, so a JSON object or string would pass as a list.
    (item_type,) = getattr(cls, "__args__", None) or (Any,)

    def structure(value: Any, _: Any) -> list[Any]:
        if not isinstance(value, list):
            raise TypeError(f"expected an array, got {_json_type(value)}")
        if item_type is Any:
            return list(value)
        items, failed = [], []
        for index, item in enumerate(value):
            try:
                items.append(converter.structure(item, item_type))
            except Exception as exc:
                failed.append(_AtIndex(f"[{index}]", exc))
        if failed:
            raise failed[0] if len(failed) == 1 else _Several(failed)
        return items

    return structure


def _dict_hook(cls: Any, converter: cattrs.Converter) -> Callable[[Any, Any], Any]:
    _, value_type = getattr(cls, "__args__", None) or (str, Any)

    def structure(value: Any, _: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise TypeError(f"expected an object, got {_json_type(value)}")
        if value_type is Any:
            return dict(value)
        members, failed = {}, []
        for key, item in value.items():
            try:
                members[key] = converter.structure(item, value_type)
            except Exception as exc:
                failed.append(_AtIndex(f".{key}", exc))
        if failed:
            raise failed[0] if len(failed) == 1 else _Several(failed)
        return members

    return structure


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _make_converter() -> cattrs.Converter:
    converter = cattrs.Converter(detailed_validation=True)
    converter.register_structure_hook(int, _strict_int)
    converter.register_structure_hook(float, _strict_float)
    converter.register_structure_hook(str, _strict_str)
    converter.register_structure_hook(bool, _strict_bool)
    converter.register_structure_hook_factory(attrs.has, lambda cls: _open_map_hook(cls, converter))
    converter.register_structure_hook_factory(_is_list_type, lambda cls: _list_hook(cls, converter))
    converter.register_structure_hook_factory(_is_dict_type, lambda cls: _dict_hook(cls, converter))
    converter.register_structure_hook_factory(_is_enum_type, _enum_hook)
    converter.register_unstructure_hook_factory(
        attrs.has, lambda cls: _drop_none_hook(cls, converter)
    )
    return converter


converter = _make_converter()


def contract_error(exc: Exception, source: str) -> ContractError:
    """One error naming every problem cattrs found (the first is the primary one):
    unknown fields, missing ones and wrong types, at every depth, together."""
    from .convert import refusal

    return refusal(_problems(_leaves(exc, "$")), source=source)


def _problems(leaves: list[tuple[str, BaseException]]) -> list[tuple[str, str, str]]:
    """(json_path, rule, message) of each leaf; the missing fields of one object in one."""
    problems: list[tuple[str, str, str]] = []
    missing: dict[str, list[str]] = {}
    for path, leaf in leaves:
        if isinstance(leaf, _UnknownKeys):
            keys = ", ".join(repr(k) for k in leaf.keys)
            text = (
                f"unknown field {keys}: not in the contract (extension fields need the 'x_' prefix)"
            )
            problems.append((path, "additionalProperties", text))
        elif isinstance(leaf, KeyError):
            if path not in missing:
                missing[path] = []
                problems.append((path, "required", ""))
            missing[path].append(repr(leaf.args[0]))
        elif isinstance(leaf, _NotOneOf):
            field = path.rpartition(".")[2] if path != "$" else ""
            problems.append((path, "enum", f"{field}: {leaf}" if field else f"{leaf}"))
        else:
            problems.append((path, "type", f"{leaf}"))
    return [(path, rule, text or _missing_text(missing[path])) for path, rule, text in problems]


def _missing_text(names: list[str]) -> str:
    if len(names) == 1:
        return f"required field {names[0]} is missing"
    return f"required fields {', '.join(names)} are missing"


def _leaves(exc: BaseException, path: str) -> list[tuple[str, BaseException]]:
    """Walk cattrs' exception groups to every real failure and its JSON path."""
    from cattrs.errors import ClassValidationError, IterableValidationError

    found: list[tuple[str, BaseException]] = []
    if isinstance(exc, ClassValidationError):
        with_notes, without_notes = exc.group_exceptions()
        for sub, note in with_notes:
            if isinstance(sub, KeyError) and not isinstance(sub, _UnknownKeys):
                found.append((path, KeyError(note.name)))
            else:
                found.extend(_leaves(sub, f"{path}.{note.name}"))
        for sub in without_notes:
            found.extend(_leaves(sub, path))
        return found
    if isinstance(exc, IterableValidationError):
        items, without_notes = exc.group_exceptions()
        for sub, item_note in items:
            found.extend(_leaves(sub, f"{path}[{item_note.index}]"))
        for sub in without_notes:
            found.extend(_leaves(sub, path))
        return found
    if isinstance(exc, _AtIndex):
        return _leaves(exc.cause, f"{path}{exc.step}")
    if isinstance(exc, _Several):
        return [leaf for failure in exc.failures for leaf in _leaves(failure, path)]
    if isinstance(exc, _UnknownKeys) and exc.also is not None:
        return [(path, exc), *_leaves(exc.also, path)]
    nested = getattr(exc, "exceptions", None)  # an ExceptionGroup (a backport on 3.10)
    if nested:
        return [leaf for sub in nested for leaf in _leaves(sub, path)]
    return [(path, exc)]
