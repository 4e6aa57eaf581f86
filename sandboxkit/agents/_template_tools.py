"""`create_template`: a Template and its first Build, started at once.

There is no tool to start a waiting Build (the split flow), so the Build always comes with
the Template: its definition is the model's `commands` and `start_cmd` (an empty build when
none are given). The SDK's idempotency key makes the client's own retries safe; a model
that retries after an error passes its own `idempotency_key` to get the same Template back.
"""

from __future__ import annotations

from typing import Any

import sandboxkit

from ..rules import (
    MAX_CPU,
    MAX_DESCRIPTION,
    MAX_DISK_MB,
    MAX_IDEMPOTENCY_KEY,
    MAX_MEMORY_MB,
    MAX_TEMPLATE_NAME,
)
from ._errors import ErrorCode, ToolError, about
from ._schema import array_of, field, integer, obj, result, string
from ._tool import Definition, Progress, Setup

__all__ = ["CREATE_TEMPLATE"]


def _create_schema(_: Setup) -> dict[str, Any]:
    # Bounds the interface states come from `sandboxkit.rules` (what the SDK checks); the
    # others (the lengths of a product, a command, an idc_name, labels) are the toolkit's
    # own bounds on model input.
    return obj(
        {
            "name": string(
                f"1-{MAX_TEMPLATE_NAME} characters: letters, digits, '_' or '-'.",
                minLength=1,
                maxLength=MAX_TEMPLATE_NAME,
            ),
            "cpu_count": integer(
                "vCPUs (with memory_mb and disk_size_mb).", minimum=1, maximum=MAX_CPU
            ),
            "memory_mb": integer("Memory in MiB.", minimum=1, maximum=MAX_MEMORY_MB),
            "disk_size_mb": integer("Disk in MiB.", minimum=1, maximum=MAX_DISK_MB),
            "product": string(
                "A preset size (SKU) instead of cpu_count/memory_mb/disk_size_mb.",
                minLength=1,
                maxLength=128,
            ),
            "commands": array_of(
                string("A shell command.", maxLength=4096),
                "Build steps, run in order.",
                maxItems=100,
            ),
            "start_cmd": string("The command sandboxes of it start with.", maxLength=4096),
            "description": string(
                f"At most {MAX_DESCRIPTION} characters.", maxLength=MAX_DESCRIPTION
            ),
            "idc_name": string("The data center; omit for the default.", maxLength=64),
            "labels": {
                "type": "object",
                "description": "String labels for filtering.",
                "additionalProperties": string("A label value.", maxLength=256),
                "maxProperties": 64,
            },
            "idempotency_key": string(
                f"Optional, 1-{MAX_IDEMPOTENCY_KEY} printable ASCII characters. Calling again "
                "with the same key and arguments returns the same template instead of making "
                "another: reuse it when retrying after an error.",
                minLength=1,
                maxLength=MAX_IDEMPOTENCY_KEY,
            ),
        },
        required=("name",),
    )


_PARTS = ("cpu_count", "memory_mb", "disk_size_mb", "product")


def _resources(args: dict[str, Any]) -> sandboxkit.CustomResources | sandboxkit.PresetResources:
    try:
        return sandboxkit.resources_from(**{k: args[k] for k in _PARTS if k in args})
    except sandboxkit.ValidationError as exc:
        raise ToolError(ErrorCode.INVALID_ARGUMENT, f"{str(exc).capitalize()}.") from None


def _create_output(_: Setup) -> dict[str, Any]:
    return result(
        {
            "template_id": field("string"),
            "build_id": field("string"),
            "status": field("string"),
            "replayed": field("boolean"),
            "idempotency_key": field("string", nullable=True),
            "hint": field("string"),
        }
    )


async def _create_template(
    setup: Setup, args: dict[str, Any], _: Progress | None
) -> dict[str, Any]:
    build: dict[str, Any] = {"commands": list(args.get("commands", ()))}
    if "start_cmd" in args:
        build["start_cmd"] = args["start_cmd"]
    with about(f"Template {args['name']!r}"):
        created = await setup.client.templates.create(
            name=args["name"],
            resources=_resources(args),
            description=args.get("description"),
            idc_name=args.get("idc_name"),
            labels=args.get("labels"),
            build=build,
            idempotency_key=args.get("idempotency_key"),
        )
    return {
        "template_id": created.id,
        "build_id": created.build_id,
        "status": str(created.status),
        "replayed": created.replayed,
        "idempotency_key": created.idempotency_key,
        "hint": "The build runs now: follow it with wait_for_build or read_build_logs.",
    }


CREATE_TEMPLATE = Definition(
    name="create_template",
    title="Create a template",
    description=(
        "Create a sandbox template and start its first build at once. Size it with "
        "cpu_count, memory_mb and disk_size_mb, or with a preset product. commands are the "
        "build steps. Returns template_id and build_id; follow the build with "
        "wait_for_build or read_build_logs. Pass an idempotency_key to retry safely."
    ),
    schema=_create_schema,
    output=_create_output,
    run=_create_template,
    read_only=False,
    destructive=False,
    idempotent=False,
    needs="templates",
)
