"""The one cattrs converter: the only place that knows wire names.

`converter` is lenient (unknown keys ignored) for the client; `strict_converter` forbids extra
keys, for the emulator and the tests that check our models against what the interface shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from . import models

__all__ = ["converter", "make_converter", "strict_converter", "structure", "unstructure"]

T = TypeVar("T")

# v1 speaks camelCase (and a few PascalCase) names; DESIGN section 8 lists the mapping.
_V1_RENAMES: Mapping[type[Any], Mapping[str, str]] = {
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
    models.PartitionEntry: {"file_system": "fileSystem", "mount_point": "mountPoint"},
    models.V1Template: {"org_id": "orgId"},
    models.OAuthToken: {"access_token": "accessToken"},
    models.ShellResult: {"url_path": "urlPath"},
}

_RESOURCE_TYPES: Mapping[str, type[models.CustomResources | models.PresetResources]] = {
    "custom": models.CustomResources,
    "preset": models.PresetResources,
}


def _structure_datetime(value: Any, _: type[datetime]) -> datetime:
    if isinstance(value, datetime):
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


def make_converter(*, strict: bool) -> cattrs.Converter:
    """Build a converter; `strict` forbids keys the models do not know."""
    conv = cattrs.Converter(forbid_extra_keys=strict, detailed_validation=strict)
    conv.register_structure_hook(datetime, _structure_datetime)
    conv.register_unstructure_hook(datetime, _unstructure_datetime)
    for cls, renames in _V1_RENAMES.items():
        overrides: dict[str, Any] = {n: override(rename=wire) for n, wire in renames.items()}
        conv.register_structure_hook(cls, make_dict_structure_fn(cls, conv, **overrides))
        conv.register_unstructure_hook(cls, make_dict_unstructure_fn(cls, conv, **overrides))
    for type_name, cls in _RESOURCE_TYPES.items():
        plain = make_dict_unstructure_fn(cls, conv, _cattrs_omit_if_default=False)

        def _tagged(value: Any, _plain: Any = plain, _type: str = type_name) -> dict[str, Any]:
            body = {k: v for k, v in _plain(value).items() if v is not None}
            return {"type": _type, **body}

        conv.register_unstructure_hook(cls, _tagged)
    conv.register_structure_hook(models.Resources, _structure_resources)
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
