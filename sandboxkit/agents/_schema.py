"""JSON Schema for tool inputs and results: small builders, and a validator of the subset
the input schemas use.

The subset (draft 2020-12 keywords): `type` (object, string, integer, number, boolean,
array), `properties`, `required`, `additionalProperties` (false, or a schema for the values),
`maxProperties`, `enum`, `minimum`, `maximum`, `exclusiveMinimum`, `minLength`, `maxLength`,
`items`, `maxItems`, `default`; `title` and `description` are annotations. A schema using
any other keyword is refused when the toolkit is built, so the validator never silently
skips a rule a model was shown.

A result's schema (`outputSchema` over MCP) is built with `result`, `field` and `either`:
closed objects whose listed properties are all required unless named optional, so a result
that grows or loses a key fails the test that checks every tool's real result against it.
Clients validate results, not this module: these schemas may use `anyOf` and `null` types.

Pure: no I/O, nothing awaits. Model input is hostile: every value is checked before any
request, and a message shows at most a short piece of what was sent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ._errors import ErrorCode, ToolError

__all__ = [
    "array_of",
    "check_schema",
    "either",
    "field",
    "integer",
    "number",
    "obj",
    "result",
    "string",
    "validate",
]

_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "maxProperties",
        "enum",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "minLength",
        "maxLength",
        "items",
        "maxItems",
        "default",
        "title",
        "description",
    }
)
_TYPES = frozenset({"object", "string", "integer", "number", "boolean", "array"})


def string(description: str, **rules: Any) -> dict[str, Any]:
    """A string property."""
    return {"type": "string", "description": description, **rules}


def integer(description: str, **rules: Any) -> dict[str, Any]:
    """An integer property."""
    return {"type": "integer", "description": description, **rules}


def number(description: str, **rules: Any) -> dict[str, Any]:
    """A number property."""
    return {"type": "number", "description": description, **rules}


def array_of(items: Mapping[str, Any], description: str, **rules: Any) -> dict[str, Any]:
    """An array property whose items follow `items`."""
    return {"type": "array", "items": dict(items), "description": description, **rules}


def obj(
    properties: Mapping[str, Mapping[str, Any]], required: tuple[str, ...] = ()
) -> dict[str, Any]:
    """A closed object: only these properties, `required` among them."""
    return {
        "type": "object",
        "properties": {name: dict(rule) for name, rule in properties.items()},
        "required": list(required),
        "additionalProperties": False,
    }


def field(kind: str, *, nullable: bool = False, **rules: Any) -> dict[str, Any]:
    """A result's property: `kind` ("string", "integer"...), or it or null."""
    return {"type": [kind, "null"] if nullable else kind, **rules}


def result(
    properties: Mapping[str, Mapping[str, Any]], optional: tuple[str, ...] = ()
) -> dict[str, Any]:
    """A result's closed object: every property required but the `optional` ones."""
    unknown = set(optional) - set(properties)
    if unknown:
        raise ValueError(f"optional names what the result does not define: {sorted(unknown)}")
    return {
        "type": "object",
        "properties": {name: dict(rule) for name, rule in properties.items()},
        "required": [name for name in properties if name not in optional],
        "additionalProperties": False,
    }


def either(*shapes: Mapping[str, Any]) -> dict[str, Any]:
    """A result that is one of `shapes` (objects); MCP wants `type: object` at the top."""
    return {"type": "object", "anyOf": [dict(shape) for shape in shapes]}


def check_schema(schema: Mapping[str, Any], where: str = "schema") -> None:
    """Raise ValueError if `schema` uses what `validate` does not understand (a bug of ours,
    caught when a toolkit is built)."""
    unknown = set(schema) - _KEYWORDS
    if unknown:
        raise ValueError(f"{where}: unsupported keywords {sorted(unknown)}")
    kind = schema.get("type")
    if kind not in _TYPES:
        raise ValueError(f"{where}: type must be one of {sorted(_TYPES)}")
    for name, rule in schema.get("properties", {}).items():
        check_schema(rule, f"{where}.{name}")
    if not set(schema.get("required", ())) <= set(schema.get("properties", {})):
        raise ValueError(f"{where}: required names a property it does not define")
    extra = schema.get("additionalProperties", True)
    if isinstance(extra, Mapping):
        check_schema(extra, f"{where}.*")
    if "items" in schema:
        check_schema(schema["items"], f"{where}[]")
    if "default" in schema:
        try:
            validate(schema, schema["default"], where)
        except ToolError as error:
            raise ValueError(f"{where}: its default breaks its rules: {error}") from None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _place(where: str) -> str:
    """Where in the arguments a rule was broken, for a message. A model chose the keys: a
    lone surrogate (no UTF-8, which a framework fails to send on) is shown escaped, and a
    long path cut."""
    if not where:
        return "The arguments"
    shown = where.encode("utf-8", "backslashreplace").decode("utf-8")
    return f"Argument {shown if len(shown) <= 80 else shown[:77] + '...'}"


def _fail(where: str, rule: str, value: Any) -> ToolError:
    return ToolError(ErrorCode.INVALID_ARGUMENT, f"{_place(where)}: {rule} (got {_shown(value)}).")


def _number(schema: Mapping[str, Any], value: Any, where: str) -> int | float:
    kind = schema["type"]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(where, f"must be {'an integer' if kind == 'integer' else 'a number'}", value)
    number: int | float = value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _fail(where, "must be a finite number", value)
        if kind == "integer":
            # JSON Schema counts 5.0 as an integer; a model's JSON library may send it so.
            if not value.is_integer():
                raise _fail(where, "must be an integer", value)
            number = int(value)
    if "minimum" in schema and number < schema["minimum"]:
        raise _fail(where, f"must be at least {schema['minimum']}", value)
    if "exclusiveMinimum" in schema and number <= schema["exclusiveMinimum"]:
        raise _fail(where, f"must be more than {schema['exclusiveMinimum']}", value)
    if "maximum" in schema and number > schema["maximum"]:
        raise _fail(where, f"must be at most {schema['maximum']}", value)
    return number


def _object(schema: Mapping[str, Any], value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(where, "must be an object", value)
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        raise _fail(where, f"must have at most {schema['maxProperties']} entries", len(value))
    properties: Mapping[str, Any] = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    out: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise _fail(where, "must have string keys", key)
        inner = f"{where}.{key}" if where else key
        if key in properties:
            out[key] = validate(properties[key], item, inner)
        elif extra is False:
            known = ", ".join(properties) or "none"
            raise _fail(inner, f"is not an argument of this tool (arguments: {known})", key)
        elif isinstance(extra, Mapping):
            out[key] = validate(extra, item, inner)
        else:
            out[key] = item
    for key in schema.get("required", ()):
        if key not in out:
            raise ToolError(
                ErrorCode.INVALID_ARGUMENT,
                f"Argument {f'{where}.{key}' if where else key}: is required.",
            )
    for key, rule in properties.items():
        if key not in out and "default" in rule:
            out[key] = rule["default"]
    return out


def validate(schema: Mapping[str, Any], value: Any, where: str = "") -> Any:
    """`value` checked against `schema`, with an object's missing properties given their
    defaults and integral floats made ints.

    Raises:
        ToolError: `invalid_argument`, naming the argument and the rule it breaks.
    """
    kind = schema["type"]
    if "enum" in schema and value not in schema["enum"]:
        choices = ", ".join(repr(choice) for choice in schema["enum"])
        raise _fail(where or "value", f"must be one of {choices}", value)
    if kind == "object":
        return _object(schema, value, where)
    if kind in ("integer", "number"):
        return _number(schema, value, where or "value")
    if kind == "boolean":
        if not isinstance(value, bool):
            raise _fail(where or "value", "must be true or false", value)
        return value
    if kind == "string":
        if not isinstance(value, str):
            raise _fail(where or "value", "must be a string", value)
        if len(value) < schema.get("minLength", 0):
            raise _fail(where, f"must have at least {schema['minLength']} characters", value)
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            raise _fail(where, f"must have at most {schema['maxLength']} characters", value)
        return value
    if not isinstance(value, list | tuple):
        raise _fail(where or "value", "must be an array", value)
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        raise _fail(where, f"must have at most {schema['maxItems']} items", len(value))
    items = schema.get("items")
    if items is None:
        return list(value)
    return [validate(items, item, f"{where}[{i}]") for i, item in enumerate(value)]
