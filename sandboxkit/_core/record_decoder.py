"""Generated structure functions for the client converter's attrs models. Pure: no I/O.

cattrs's `make_dict_structure_fn` gathers the present optional fields into a dict, calls the
class with `**kwargs` and calls a hook for every field, string or not: about two thirds of
the time to decode a page of Builds. The function made here does the same job for the
lenient client converter with plain positional arguments, and checks a string, integer or
boolean value inline, calling the converter's hook only for values that need converting
(and so keeping its verdict on them). Wire names and hooks still come from the converter;
the strict converter keeps cattrs's own functions, its detailed errors and extra-key checks.
"""

from __future__ import annotations

import functools
import linecache
import operator
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import cattrs

__all__ = [
    "INLINE_TABLE",
    "INLINE_TYPES",
    "make_record_decoder",
    "not_an_object",
    "optional_inner",
]

# Values of these exact types need no hook where that type is due (both converters' Optional
# hooks and the generated code below skip them).
INLINE_TYPES = (str, int, bool)
# A hook with this attribute, a mapping, structures a plain `str` value as `table.get(value,
# value)`; the generated code does that lookup itself rather than call the hook.
INLINE_TABLE = "inline_table"
_MISSING = object()


def make_record_decoder(
    cls: type[Any], conv: cattrs.Converter, renames: Mapping[str, str] | None = None
) -> Callable[[Any, Any], Any] | None:
    """A structure function for `cls`, or None when cattrs's own must be used.

    `renames` maps attribute names to wire names. Generic classes and fields with factories,
    `init=False` or keyword-only arguments are left to cattrs (no model needs more here).
    """
    model = typing.get_origin(cls) or cls
    if not attrs.has(model):
        return None
    # A generic model (Page[Build]): its type variables are bound by the subscription.
    bound = dict(zip(getattr(model, "__parameters__", ()), typing.get_args(cls), strict=False))
    if len(bound) != len(getattr(model, "__parameters__", ())):
        return None  # a bare generic: cattrs decides what an unbound variable means
    fields = attrs.fields(attrs.resolve_types(model))
    if any(
        not f.init or f.kw_only or isinstance(f.default, attrs.Factory)  # type: ignore[arg-type]
        for f in fields
    ):
        return None
    renames = renames or {}
    name = model.__name__
    scope: dict[str, Any] = {
        "cls": model,
        "Mapping": Mapping,
        "MISSING": _MISSING,
        "not_an_object": not_an_object,
    }
    lines = [
        "def decode(o, _):",
        "    if type(o) is not dict and not isinstance(o, Mapping):",
        f"        raise not_an_object({name!r}, o)",
        "    get = o.get",
    ]
    for index, field in enumerate(fields):
        value, hook, type_ = f"v{index}", f"h{index}", f"t{index}"
        wire = renames.get(field.name, field.name)
        field_type = _bind(field.type, bound)
        inner = optional_inner(field_type)
        none_by_default = inner is not None and field.default is None
        if none_by_default:
            field_type = inner  # None is handled inline below: call the inner hook directly
        inline = field_type if field_type in INLINE_TYPES else None
        scope[hook] = conv.get_structure_hook(field_type)
        scope[type_] = field_type
        converted = f"{hook}({value}, {type_})"
        table = getattr(scope[hook], INLINE_TABLE, None)
        if table is not None:  # the hook's own lookup for a plain string, done inline
            scope[f"m{index}"] = table
            converted = f"(m{index}.get({value}, {value}) if type({value}) is str else {converted})"
        if field.default is attrs.NOTHING:
            lines.append(f"    {value} = o[{wire!r}]")
            if inline:
                lines.append(f"    if type({value}) is not {inline.__name__}:")
                lines.append(f"        {value} = {converted}")
            else:
                lines.append(f"    {value} = {converted}")
        elif none_by_default:
            # Absent and null are the same None; a value of the plain type is taken as is.
            lines.append(f"    {value} = get({wire!r})")
            skip = f" and type({value}) is not {inline.__name__}" if inline else ""
            lines.append(f"    if {value} is not None{skip}:")
            lines.append(f"        {value} = {converted}")
        else:
            scope[f"d{index}"] = field.default
            lines.append(f"    {value} = get({wire!r}, MISSING)")
            lines.append(f"    {value} = d{index} if {value} is MISSING else {converted}")
    arguments = ", ".join(f"v{index}" for index in range(len(fields)))
    lines.append(f"    return cls({arguments})")
    source = "\n".join(lines) + "\n"
    label = repr(cls) if model is not cls else f"{cls.__module__}.{cls.__qualname__}"
    filename = f"<sandboxkit record decoder {label}>"
    # Tracebacks through generated code show its lines, as they do for attrs and cattrs.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), scope)
    decode: Callable[[Any, Any], Any] = scope["decode"]
    return decode


def _bind(type_: Any, bound: Mapping[Any, Any]) -> Any:
    """`type_` with the model's type variables replaced by what they are bound to."""
    if isinstance(type_, typing.TypeVar):
        return bound.get(type_, type_)
    parameters = getattr(type_, "__parameters__", ())
    if parameters and all(p in bound for p in parameters):
        return type_[tuple(bound[p] for p in parameters)]
    return type_


def optional_inner(type_: Any) -> Any | None:
    """The X of `X | None` (or `Optional[X]`), the `X | Y` of `X | Y | None`; None for any
    other type."""
    args = typing.get_args(type_)
    if typing.get_origin(type_) not in (typing.Union, types.UnionType) or type(None) not in args:
        return None
    rest = tuple(arg for arg in args if arg is not type(None))
    return functools.reduce(operator.or_, rest)


def not_an_object(name: str, value: Any) -> TypeError:
    """The error for a non-object where record `name` is due.

    cattrs reads a record with `in` and `[]`, so a string or list where an object belongs
    would quietly become a record of defaults (a `credential: "x"` an empty credential).
    """
    return TypeError(f"{name} must be an object, not {type(value).__name__}")
