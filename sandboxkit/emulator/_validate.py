"""Validation of v2 requests, by the interface's rules; failures raise ``V2Problem`` 400."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeGuard

from ._state import PRODUCT_BY_SKU
from ._wire import V2Problem

__all__ = ["check_idempotency_key", "int_query", "invalid", "template_request"]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_KEY = re.compile(r"^[\x21-\x7e]{1,64}$")
_DIGITS = re.compile(r"^[0-9]{1,12}$")
_CUSTOM_LIMITS = {"cpu_count": 16, "memory_mb": 65536, "disk_size_mb": 65536}
_TOP_LEVEL = {"name", "resources", "description", "idc_name", "labels", "build"}


def invalid(message: str) -> V2Problem:
    """A 400 ``Parameter.Invalid``."""
    return V2Problem(400, "Parameter.Invalid", message)


def check_idempotency_key(value: str | None) -> str:
    """The ``Idempotency-Key`` header: required, 1-64 printable ASCII, no whitespace."""
    if value is None:
        raise invalid("the Idempotency-Key header is required")
    if not _KEY.match(value):
        raise invalid("Idempotency-Key must be 1-64 printable ASCII characters, no whitespace")
    return value


def int_query(query: Mapping[str, str], name: str, default: int, low: int, high: int | None) -> int:
    """An integer query parameter within ``[low, high]``; non-integers are invalid."""
    raw = query.get(name)
    if raw is None:
        return default
    if not _DIGITS.match(raw):
        raise invalid(f"{name} must be an integer")
    value = int(raw)
    if value < low or (high is not None and value > high):
        upper = "" if high is None else f" and <= {high}"
        raise invalid(f"{name} must be >= {low}{upper}")
    return value


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _optional_str(body: Mapping[str, Any], name: str, max_len: int) -> None:
    value = body.get(name)
    if value is not None and (not isinstance(value, str) or len(value) > max_len):
        raise invalid(f"{name} must be a string of at most {max_len} characters")


def _resources(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise invalid("resources must be an object")
    kind = value.get("type")
    if kind == "preset":
        if set(value) != {"type", "product"}:
            raise invalid("preset resources take exactly type and product")
        product = value["product"]
        if not isinstance(product, str) or product not in PRODUCT_BY_SKU:
            raise invalid("resources.product is not an active catalog product")
        return dict(value)
    if kind == "custom":
        extra = set(value) - {"type", "architecture", *_CUSTOM_LIMITS}
        if extra:
            raise invalid(f"custom resources do not take {sorted(extra)}")
        for field, limit in _CUSTOM_LIMITS.items():
            number = value.get(field)
            if not _is_int(number):
                raise invalid(f"resources.{field} is required and must be an integer")
            if not 1 <= number <= limit:
                raise invalid(f"resources.{field} must be between 1 and {limit}")
        arch = value.get("architecture", "x86_64")
        if arch != "x86_64":
            raise invalid("resources.architecture is not available in this data center")
        return {**value, "architecture": arch}
    raise invalid("resources.type must be 'preset' or 'custom'")


def _build(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise invalid("build must be an object")
    commands = value.get("commands")
    if commands is not None and (
        not isinstance(commands, list) or not all(isinstance(c, str) for c in commands)
    ):
        raise invalid("build.commands must be an array of strings")
    if value.get("start_cmd") is not None and not isinstance(value["start_cmd"], str):
        raise invalid("build.start_cmd must be a string")
    if value.get("source") is not None and not isinstance(value["source"], dict):
        raise invalid("build.source must be an object")
    return dict(value)


def template_request(body: Any) -> dict[str, Any]:
    """A validated template create request; JSON nulls of optional fields count as absent.

    Raises:
        V2Problem: 400 ``Parameter.Invalid`` naming the first broken rule.
    """
    if not isinstance(body, dict):
        raise invalid("the request body must be a JSON object")
    unknown = set(body) - _TOP_LEVEL
    if unknown:
        raise invalid(f"unknown fields: {sorted(unknown)}")
    name = body.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise invalid("name is required: 1-64 characters of letters, digits, '_' and '-'")
    _optional_str(body, "description", 256)
    idc_name = body.get("idc_name")
    if idc_name is not None and not isinstance(idc_name, str):
        raise invalid("idc_name must be a string")
    labels = body.get("labels")
    if labels is not None and (
        not isinstance(labels, dict)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items())
    ):
        raise invalid("labels must be an object of strings")
    if "resources" not in body:
        raise invalid("resources is required")
    result: dict[str, Any] = {k: v for k, v in body.items() if v is not None}
    result["resources"] = _resources(body["resources"])
    if "build" in result:
        result["build"] = _build(result["build"])
    return result
