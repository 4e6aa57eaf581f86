"""The one cattrs converter: the only place that knows wire names.

`converter` is lenient (unknown keys ignored) for the client; `strict_converter` forbids extra
keys, for the emulator and the tests that check our models against what the interface shows.
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from .. import models
from .record_decoder import INLINE_TYPES, make_record_decoder, not_an_object, optional_inner

__all__ = ["converter", "make_converter", "strict_converter", "structure", "unstructure"]

T = TypeVar("T")

# v1 speaks camelCase (and a few PascalCase) names; docs/design.md section 8 lists the mapping.
# Order matters: a model's hooks are generated with its fields' hooks as registered at that
# moment, so a nested model (PartitionEntry inside Image) must come before its container.
_V1_RENAMES: Mapping[type[Any], Mapping[str, str]] = {
    models.PartitionEntry: {"file_system": "fileSystem", "mount_point": "mountPoint"},
    models.Image: {
        "supported_products": "supportedProducts",
        "boot_mode": "BootMode",
        "default_partition_table": "DefaultPartitionTable",
        "os_architecture": "OSArchitecture",
        "os_series": "OSSeries",
        "os_version": "OSVersion",
        "system_disk_size": "SystemDiskSize",
        "org_id": "orgId",
        "created_at": "createdAt",
    },
    models.V1Template: {"org_id": "orgId"},
    models.OAuthToken: {"access_token": "accessToken"},
    models.ShellResult: {"url_path": "urlPath"},
    models.ApiKeyRequest: {"expires_at": "expiresAt"},
    models.ContainerSpec: {"template_id": "templateId"},
    models.ElasticIpAssociation: {"instance_id": "instanceID"},
}

# Enumerations whose full set the interface does not show: a field is typed `E | str`, and a
# known value becomes its member while any other stays the string the service sent.
_OPEN_ENUMS: tuple[type[enum.Enum], ...] = (models.BuildStatus,)

_RESOURCE_TYPES: Mapping[str, type[models.CustomResources | models.PresetResources]] = {
    "custom": models.CustomResources,
    "preset": models.PresetResources,
}


def _structure_datetime(value: Any, _: type[datetime]) -> datetime:
    if type(value) is str:  # the wire's form: checked first, it is nearly every call
        parsed = datetime.fromisoformat(value)
    elif isinstance(value, datetime):
        parsed = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        parsed = datetime.fromtimestamp(value, UTC)
    elif isinstance(value, str):
        parsed = datetime.fromisoformat(value)
    else:
        raise TypeError(f"not a timestamp: {value!r}")
    # The interface promises UTC; a naive value is read as UTC so it is always comparable.
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _unstructure_datetime(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _structure_resources(value: Any, _: Any) -> models.CustomResources | models.PresetResources:
    if not isinstance(value, Mapping):
        raise TypeError(f"resources must be an object, not {type(value).__name__}")
    cls = _RESOURCE_TYPES.get(value.get("type", ""))
    if cls is None:
        cls = models.PresetResources if "product" in value else models.CustomResources
    fields = {k: v for k, v in value.items() if k != "type"}
    return converter.structure(fields, cls)


def _structure_container(value: Any, _: type[models.Container]) -> models.Container:
    # No container field is shown by the interface: keep everything, lift what is plainly there.
    if not isinstance(value, Mapping):
        raise TypeError(f"a container record must be an object, not {type(value).__name__}")
    raw = dict(value)
    ident, status = raw.get("id"), raw.get("status")
    return models.Container(
        id=ident if isinstance(ident, str) else None,
        status=status if isinstance(status, str) else None,
        raw=raw,
    )


def _ids_of(value: Any) -> tuple[str, ...]:
    if isinstance(value, Mapping):
        ids = value.get("ids")
        if isinstance(ids, list):
            return tuple(i for i in ids if isinstance(i, str))
        ident = value.get("id")
        return (ident,) if isinstance(ident, str) else ()
    if isinstance(value, list):
        return tuple(
            i for item in value for i in ((item,) if isinstance(item, str) else _ids_of(item))
        )
    return ()


def _structure_created(value: Any, _: type[models.ContainersCreated]) -> models.ContainersCreated:
    # The create answer is not shown by the interface; read what is plainly there, keep all.
    result = value.get("result") if isinstance(value, Mapping) else None
    return models.ContainersCreated(
        ids=_ids_of(value),
        result=result if isinstance(result, str) else None,
        raw=value,
    )


def _objects_only(cls: Any, structure_fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    name = getattr(cls, "__name__", str(cls))

    def structure_record(value: Any, type_: Any) -> Any:
        if type(value) is not dict and not isinstance(value, Mapping):
            raise not_an_object(name, value)
        return structure_fn(value, type_)

    return structure_record


def _structure_str(value: Any, _: type[str]) -> str:
    if isinstance(value, str):
        return value
    # A number where the interface says string is tolerable; an object or array is not data
    # this field can hold (cattrs would otherwise store its repr).
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise TypeError(f"expected a string, got {type(value).__name__}")


def _open_enum_of(cls: Any) -> type[enum.Enum] | None:
    """E for a union of exactly one of `_OPEN_ENUMS` and `str`, else None."""
    args = typing.get_args(cls)
    if typing.get_origin(cls) not in (typing.Union, types.UnionType) or len(args) != 2:
        return None
    return next((e for e in _OPEN_ENUMS if set(args) == {e, str}), None)


def _is_open_enum(cls: Any) -> bool:
    return _open_enum_of(cls) is not None


class _OpenEnumHook:
    """Structures an `E | str` field: a known value as its member, any other as text.

    Its `inline_table` (INLINE_TABLE) lets the generated decoders look a plain string up
    without calling it; the rule stays here.
    """

    def __init__(self, cls: Any) -> None:
        members = _open_enum_of(cls) or ()
        self.inline_table: Mapping[str, Any] = {member.value: member for member in members}

    def __call__(self, value: Any, _: Any) -> Any:
        text = value if type(value) is str else _structure_str(value, str)
        return self.inline_table.get(text, text)


def _is_optional(cls: Any) -> bool:
    return optional_inner(cls) is not None


def _optional_hook(cls: Any, conv: cattrs.Converter) -> Callable[[Any, Any], Any]:
    # cattrs dispatches `X | None` afresh for every value, most of the decoding time of a
    # Build page (13 optional fields). Look the inner hook up once instead.
    inner = optional_inner(cls)
    hook = conv.get_structure_hook(inner)
    if inner in INLINE_TYPES:

        def scalar(value: Any, _: Any) -> Any:
            if value is None or type(value) is inner:
                return value
            return hook(value, inner)

        return scalar

    def nested(value: Any, _: Any) -> Any:
        return None if value is None else hook(value, inner)

    return nested


def _is_homogeneous_tuple(cls: Any) -> bool:
    args = typing.get_args(cls)
    return typing.get_origin(cls) is tuple and len(args) == 2 and args[1] is Ellipsis


def _tuple_hook(cls: Any, conv: cattrs.Converter) -> Callable[[Any, Any], Any]:
    # cattrs takes any iterable here (a string became a tuple of its characters) and looks the
    # element hook up again for every value. A JSON array is a list: take only that (or a
    # tuple, from a model round trip), with the element hook looked up once.
    inner = typing.get_args(cls)[0]
    hook = conv.get_structure_hook(inner)

    def check_array(value: Any) -> None:
        if type(value) is not list and not isinstance(value, list | tuple):
            raise TypeError(f"expected an array, got {type(value).__name__}")

    if inner is str:

        def strings(value: Any, _: Any) -> tuple[str, ...]:
            check_array(value)
            for item in value:
                if type(item) is not str:
                    return tuple([hook(item, str) for item in value])
            return tuple(value)

        return strings

    def items(value: Any, _: Any) -> tuple[Any, ...]:
        check_array(value)
        return tuple([hook(item, inner) for item in value])

    return items


def _is_object_of_anything(cls: Any) -> bool:
    return typing.get_origin(cls) in (Mapping, dict) and typing.get_args(cls) == (str, Any)


def _object_hook(value: Any, _: Any) -> dict[str, Any]:
    # A JSON object passed through as it came (cattrs would rebuild it key by key).
    if type(value) is not dict and not isinstance(value, Mapping):
        raise TypeError(f"expected an object, got {type(value).__name__}")
    for key in value:  # a plain loop: all() of a generator costs more on small objects
        if type(key) is not str:
            return {_structure_str(k, str): item for k, item in value.items()}
    return dict(value)


def _wire_names(renames: Mapping[str, str]) -> dict[str, Any]:
    return {name: override(rename=wire) for name, wire in renames.items()}


def make_converter(*, strict: bool, generated: bool | None = None) -> cattrs.Converter:
    """Build a converter; `strict` forbids keys the models do not know. `generated`: records
    are decoded by generated positional code (`_record_decoder`) rather than cattrs's own
    functions; by default, unless `strict`."""
    if generated is None:
        generated = not strict
    conv = cattrs.Converter(forbid_extra_keys=strict, detailed_validation=strict)
    conv.register_structure_hook(str, _structure_str)
    conv.register_structure_hook_factory(_is_open_enum, _OpenEnumHook)
    for open_enum in _OPEN_ENUMS:  # the wire form is the plain string
        conv.register_unstructure_hook(open_enum, lambda member: member.value)
    conv.register_structure_hook_factory(_is_optional, _optional_hook)
    conv.register_structure_hook_factory(_is_homogeneous_tuple, _tuple_hook)
    conv.register_structure_hook_factory(_is_object_of_anything, lambda _: _object_hook)
    conv.register_structure_hook(datetime, _structure_datetime)
    conv.register_unstructure_hook(datetime, _unstructure_datetime)

    def record_hook(cls: Any, renames: Mapping[str, str]) -> Callable[[Any, Any], Any]:
        # The client decodes with generated positional code (see _record_decoder); the strict
        # converter keeps cattrs's own, with its extra-key checks and detailed errors.
        fast = make_record_decoder(cls, conv, renames) if generated else None
        if fast is not None:
            return fast
        return _objects_only(cls, make_dict_structure_fn(cls, conv, **_wire_names(renames)))

    conv.register_structure_hook_factory(attrs.has, lambda cls: record_hook(cls, {}))
    for cls, renames in _V1_RENAMES.items():
        conv.register_structure_hook(cls, record_hook(cls, renames))
        conv.register_unstructure_hook(
            cls, make_dict_unstructure_fn(cls, conv, **_wire_names(renames))
        )
    for type_name, cls in _RESOURCE_TYPES.items():
        plain = make_dict_unstructure_fn(cls, conv, _cattrs_omit_if_default=False)

        def _tagged(value: Any, _plain: Any = plain, _type: str = type_name) -> dict[str, Any]:
            body = {k: v for k, v in _plain(value).items() if v is not None}
            return {"type": _type, **body}

        conv.register_unstructure_hook(cls, _tagged)
    conv.register_structure_hook(models.Resources, _structure_resources)
    conv.register_structure_hook(models.Container, _structure_container)
    conv.register_unstructure_hook(models.Container, lambda c: dict(c.raw))
    conv.register_structure_hook(models.ContainersCreated, _structure_created)
    conv.register_unstructure_hook(models.ContainersCreated, lambda c: c.raw)
    return conv


converter = make_converter(strict=False)
strict_converter = make_converter(strict=True)


def structure(value: Any, cls: type[T]) -> T:
    """Structure a wire value into `cls` with the lenient client converter."""
    return converter.structure(value, cls)


def unstructure(value: Any) -> Any:
    """Unstructure a model into wire form, dropping attributes that are None."""
    raw = converter.unstructure(value)
    if attrs.has(type(value)) and isinstance(raw, dict):
        return {k: v for k, v in raw.items() if v is not None}
    return raw
