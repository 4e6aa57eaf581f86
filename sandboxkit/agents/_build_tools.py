"""The build tools: list, read, follow and wait for a Template's Builds.

Each is one short call of `client.templates`, with the page sizes and the wait bounded by
`ToolLimits` and the results flattened to JSON a model reads easily.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .. import errors
from ..models import Build, LogLevel
from ..rules import MAX_LOG_LIMIT
from ._errors import ErrorCode, ToolError, about
from ._file_tools import MAX_OFFSET
from ._schema import field, integer, number, obj, result, string
from ._tool import Definition, Progress, Setup

__all__ = [
    "BUILD_RESULT",
    "GET_BUILD",
    "LIST_BUILDS",
    "READ_BUILD_LOGS",
    "WAIT_FOR_BUILD",
    "build_json",
]

_ID = {"minLength": 1, "maxLength": 256}


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def _cut(text: str | None, cap: int) -> str | None:
    if text is None or len(text) <= cap:
        return text
    return text[:cap] + f"... [{len(text) - cap} more characters cut]"


def build_json(build: Build, cap: int = 8192) -> dict[str, Any]:
    """A Build as a model reads it (times in ISO 8601, the failure's message cut at `cap`)."""
    failure = build.failure
    return {
        "id": build.id,
        "template_id": build.template_id,
        "status": None if build.status is None else str(build.status),
        "finished": build.is_finished,
        "trigger": build.trigger,
        "artifact_state": build.artifact_state,
        "created_at": _iso(build.created_at),
        "started_at": _iso(build.started_at),
        "finished_at": _iso(build.finished_at),
        "failure": None
        if failure is None
        else {"code": failure.code, "message": _cut(failure.message, cap)},
    }


# The schema of `build_json`'s dict: every build tool's result holds it.
BUILD_RESULT = result(
    {
        "id": field("string"),
        "template_id": field("string", nullable=True),
        "status": field("string", nullable=True),
        "finished": field("boolean"),
        "trigger": field("string", nullable=True),
        "artifact_state": field("string", nullable=True),
        "created_at": field("string", nullable=True),
        "started_at": field("string", nullable=True),
        "finished_at": field("string", nullable=True),
        "failure": {
            "anyOf": [
                result(
                    {
                        "code": field("string", nullable=True),
                        "message": field("string", nullable=True),
                    }
                ),
                {"type": "null"},
            ]
        },
    }
)


def _template_id() -> dict[str, Any]:
    return string("The template's id (create_template returns it).", **_ID)


def _build_id() -> dict[str, Any]:
    return string("The build's id (create_template or list_builds returns it).", **_ID)


def _build_subject(args: dict[str, Any]) -> str:
    """What an error about the `template_id` and `build_id` arguments' build is about."""
    return f"Build {args['build_id']!r} of template {args['template_id']!r}"


# -- list_builds, get_build -----------------------------------------------------------------


def _list_schema(setup: Setup) -> dict[str, Any]:
    most = setup.limits.max_build_page
    return obj(
        {
            "template_id": _template_id(),
            "page": integer("The page, from 1.", minimum=1, maximum=MAX_OFFSET, default=1),
            "page_size": integer(
                "Builds per page.", minimum=1, maximum=most, default=min(20, most)
            ),
        },
        required=("template_id",),
    )


def _list_output(_: Setup) -> dict[str, Any]:
    return result(
        {
            "template_id": field("string"),
            "builds": {"type": "array", "items": BUILD_RESULT},
            "total": field("integer", minimum=0),
            "page": field("integer", minimum=1),
            "has_more": field("boolean"),
            "hint": field("string"),
        },
        optional=("hint",),
    )


async def _list_builds(setup: Setup, args: dict[str, Any], _: Progress | None) -> dict[str, Any]:
    template_id, page, size = args["template_id"], args["page"], args["page_size"]
    with about(f"Template {template_id!r}"):
        found = await setup.client.templates.builds_page(template_id, page=page, page_size=size)
    cap = setup.limits.max_log_line
    result: dict[str, Any] = {
        "template_id": template_id,
        "builds": [build_json(b, cap) for b in found.items],
        "total": found.total,
        "page": found.page,
        "has_more": found.page * found.page_size < found.total,
    }
    if result["has_more"]:
        result["hint"] = f"Older builds remain: call again with page={found.page + 1}."
    return result


LIST_BUILDS = Definition(
    name="list_builds",
    title="List builds",
    description=(
        "List a template's builds, newest first, one page at a time (at most "
        "{max_build_page} per page): status, times and failure of each."
    ),
    schema=_list_schema,
    output=_list_output,
    run=_list_builds,
    read_only=True,
    destructive=False,
    idempotent=True,
    needs="templates",
)


def _get_schema(_: Setup) -> dict[str, Any]:
    return obj(
        {"template_id": _template_id(), "build_id": _build_id()},
        required=("template_id", "build_id"),
    )


def _get_output(_: Setup) -> dict[str, Any]:
    return result({"build": BUILD_RESULT})


async def _get_build(setup: Setup, args: dict[str, Any], _: Progress | None) -> dict[str, Any]:
    subject = _build_subject(args)
    with about(subject):
        build = await setup.client.templates.get_build(args["template_id"], args["build_id"])
    if build is None:
        raise ToolError(ErrorCode.NOT_FOUND, f"{subject}: not found.")
    return {"build": build_json(build, setup.limits.max_log_line)}


GET_BUILD = Definition(
    name="get_build",
    title="Get a build",
    description="Read one build of a template now: its status, times and failure, if any.",
    schema=_get_schema,
    output=_get_output,
    run=_get_build,
    read_only=True,
    destructive=False,
    idempotent=True,
    needs="templates",
)


# -- read_build_logs ------------------------------------------------------------------------


def _logs_schema(setup: Setup) -> dict[str, Any]:
    most = setup.limits.max_log_page
    return obj(
        {
            "template_id": _template_id(),
            "build_id": _build_id(),
            "offset": integer(
                "The entry to start at: 0, or the next_offset of the previous page.",
                minimum=0,
                maximum=MAX_OFFSET,
                default=0,
            ),
            "limit": integer(
                "The most entries to return.",
                minimum=1,
                maximum=most,
                default=min(MAX_LOG_LIMIT, most),
            ),
            "level": string(
                "Only entries of this level (offsets then count these entries only).",
                enum=list(LogLevel.ALL),
            ),
        },
        required=("template_id", "build_id"),
    )


def _logs_output(_: Setup) -> dict[str, Any]:
    entry = result(
        {
            "offset": field("integer", minimum=0),
            "level": field("string"),
            "message": field("string"),
            "timestamp": field("string", nullable=True),
        }
    )
    return result(
        {
            "template_id": field("string"),
            "build_id": field("string"),
            "entries": {"type": "array", "items": entry},
            "next_offset": field("integer", minimum=0),
            "has_more": field("boolean"),
            "hint": field("string"),
        }
    )


async def _read_build_logs(
    setup: Setup, args: dict[str, Any], _: Progress | None
) -> dict[str, Any]:
    template_id, build_id = args["template_id"], args["build_id"]
    offset, limit = args["offset"], args["limit"]
    entries: list[Any] = []
    with about(_build_subject(args)):
        # One entry more than asked says whether more exist, without another request when
        # it comes in the same answer.
        stream = setup.client.templates.build_logs(
            template_id,
            build_id,
            level=args.get("level"),
            offset=offset,
            limit=min(MAX_LOG_LIMIT, limit + 1),
        )
        async with stream:
            async for entry in stream:
                entries.append(entry)
                if len(entries) > limit:
                    break
    more = len(entries) > limit
    if more:
        next_offset = entries[limit].offset
        entries = entries[:limit]
    else:
        next_offset = entries[-1].offset + 1 if entries else offset
    cap = setup.limits.max_log_line
    result: dict[str, Any] = {
        "template_id": template_id,
        "build_id": build_id,
        "entries": [
            {
                "offset": e.offset,
                "level": e.level,
                "message": _cut(e.message, cap),
                "timestamp": _iso(e.timestamp),
            }
            for e in entries
        ],
        "next_offset": next_offset,
        "has_more": more,
    }
    result["hint"] = (
        f"More entries: call again with offset={next_offset}."
        if more
        else f"No more entries now; a running build logs more later (offset={next_offset})."
    )
    return result


READ_BUILD_LOGS = Definition(
    name="read_build_logs",
    title="Read build logs",
    description=(
        "Read one page of a build's log (at most {max_log_page} entries), optionally only "
        "one level. Returns entries, next_offset and has_more: call again with "
        "offset=next_offset to read on, or later to see what a running build logs next."
    ),
    schema=_logs_schema,
    output=_logs_output,
    run=_read_build_logs,
    read_only=True,
    destructive=False,
    idempotent=True,
    needs="templates",
)


# -- wait_for_build -------------------------------------------------------------------------


def _wait_schema(setup: Setup) -> dict[str, Any]:
    limits = setup.limits
    return obj(
        {
            "template_id": _template_id(),
            "build_id": _build_id(),
            "timeout": number(
                "The most seconds to wait.",
                exclusiveMinimum=0,
                maximum=limits.max_wait,
                default=limits.wait,
            ),
        },
        required=("template_id", "build_id"),
    )


def _wait_output(_: Setup) -> dict[str, Any]:
    return result(
        {
            "finished": field("boolean"),
            "build": {"anyOf": [BUILD_RESULT, {"type": "null"}]},
            "hint": field("string"),
        },
        optional=("hint",),
    )


async def _wait_for_build(setup: Setup, args: dict[str, Any], _: Progress | None) -> dict[str, Any]:
    template_id, build_id, timeout = args["template_id"], args["build_id"], args["timeout"]
    cap = setup.limits.max_log_line
    with about(_build_subject(args)):
        try:
            build = await setup.client.templates.wait_for_build(
                template_id, build_id, timeout=float(timeout)
            )
        except errors.BuildWaitTimeoutError as exc:
            # Not a failure: the build goes on, and the model decides whether to wait more.
            return {
                "finished": False,
                "build": None if exc.build is None else build_json(exc.build, cap),
                "hint": f"Still running after {timeout:g} s: call wait_for_build again, or "
                "read_build_logs to see its progress.",
            }
    return {"finished": True, "build": build_json(build, cap)}


WAIT_FOR_BUILD = Definition(
    name="wait_for_build",
    title="Wait for a build",
    description=(
        "Wait until a build is finished (ready or failed), up to timeout seconds (at most "
        "{max_wait:g}). Returns finished and the build; finished=false means it still "
        "runs: wait again or read its logs."
    ),
    schema=_wait_schema,
    output=_wait_output,
    run=_wait_for_build,
    read_only=True,
    destructive=False,
    idempotent=True,
    needs="templates",
)
