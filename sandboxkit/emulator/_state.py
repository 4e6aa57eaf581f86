"""Control-plane v2 state: templates, builds moving by the clock, their logs, idempotency keys.

Build statuses are computed from the clock whenever they are read, so a ManualClock drives
them without any background task. A started build spends the first tenth of
``build_seconds`` in ``waiting`` (queued), then ``building``, then ``ready`` or ``failed``.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from typing import Any

import attrs

from ._wire import iso

__all__ = [
    "PRODUCTS",
    "PRODUCT_BY_SKU",
    "Build",
    "ControlState",
    "IdempotencyRecord",
    "Template",
    "canonical",
]

IDEMPOTENCY_RETENTION = 24 * 3600.0
QUEUE_FRACTION = 0.1

# The preset catalog (`GET /api/v2/products`). Preset values are not bound by the custom
# limits, hence the large one.
PRODUCTS: tuple[dict[str, Any], ...] = (
    {
        "product": "sku-small",
        "product_name": "X_SMALL",
        "cpu_count": 2,
        "memory_mb": 4096,
        "disk_size_mb": 20480,
        "architecture": "x86_64",
    },
    {
        "product": "sku-medium",
        "product_name": "SMALL",
        "cpu_count": 4,
        "memory_mb": 8192,
        "disk_size_mb": 40960,
        "architecture": "x86_64",
    },
    {
        "product": "sku-xlarge",
        "product_name": "X_LARGE",
        "cpu_count": 32,
        "memory_mb": 131072,
        "disk_size_mb": 204800,
        "architecture": "x86_64",
    },
)
PRODUCT_BY_SKU = {p["product"]: p for p in PRODUCTS}


def canonical(body: Any) -> str:
    """Canonical JSON text, so a replay compares bodies, not their formatting."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@attrs.define(slots=True)
class Build:
    """One build attempt; its status and logs follow from ``started`` and the clock."""

    id: str
    template_id: str
    seq: int
    trigger: str
    created: float
    resources: dict[str, Any]
    source: dict[str, Any]
    commands: list[str]
    start_cmd: str
    product: str | None = None
    product_name: str | None = None
    idc: str = ""
    duration: float = 1.0
    started: float | None = None
    failure: dict[str, str] | None = None

    def status(self, now: float) -> str:
        """``waiting`` (not started or queued), ``building``, ``ready`` or ``failed``."""
        if self.started is None or now < self.started + QUEUE_FRACTION * self.duration:
            return "waiting"
        if now < self.started + self.duration:
            return "building"
        return "failed" if self.failure is not None else "ready"

    def render(self, now: float) -> dict[str, Any]:
        """The Build as the list endpoint shows it."""
        status = self.status(now)
        body: dict[str, Any] = {
            "id": self.id,
            "template_id": self.template_id,
            "trigger": self.trigger,
            "status": status,
            "artifact_state": "present" if status == "ready" else "absent",
            "source_type": "image",
            "resources": dict(self.resources),
            "created_at": iso(self.created),
            "source": dict(self.source),
            "commands": list(self.commands),
            "start_cmd": self.start_cmd,
        }
        if self.product is not None:
            body["product"] = self.product
            body["product_name"] = self.product_name
        if self.started is not None:
            began = self.started + QUEUE_FRACTION * self.duration
            if now >= began:
                body["started_at"] = iso(began)
            if now >= self.started + self.duration:
                body["finished_at"] = iso(self.started + self.duration)
                if self.failure is not None:
                    body["failure"] = dict(self.failure)
        return body

    def logs(self, now: float) -> list[tuple[str, str, float]]:
        """Every log entry emitted by ``now``: ``(level, message, time)``, oldest first."""
        if self.started is None:
            return []
        image = str(self.source.get("image", "ubuntu:22.04"))
        plan: list[tuple[float, str, str]] = [
            (0.0, "info", f"build {self.id} queued"),
            (0.0, "debug", f"scheduler: waiting for a builder in {self.idc}"),
            (QUEUE_FRACTION, "info", f"builder assigned; pulling base image {image}"),
            (0.15, "debug", f"layer sha256:{self.id[-8:]} pulled"),
            (0.25, "warn", f"base image {image} is older than 90 days"),
        ]
        steps = self.commands or ["true"]
        for i, command in enumerate(steps):
            at = 0.3 + 0.4 * i / len(steps)
            plan.append((at, "info", f"running step {i + 1}/{len(steps)}: {command}"))
            plan.append((at, "debug", f"step {i + 1} exited with status 0"))
        if self.failure is None:
            plan.append((0.8, "error", "cache upload failed: cache unavailable; continuing"))
            plan.append((0.9, "info", "exporting image layers"))
            plan.append((1.0, "info", f"build {self.id} finished: ready"))
        else:
            plan.append((0.8, "warn", "builder memory pressure is high"))
            failure = self.failure
            plan.append((1.0, "error", f"build failed: {failure['code']}: {failure['message']}"))
        entries = []
        for fraction, level, message in plan:
            at = self.started + fraction * self.duration
            if at <= now:
                entries.append((level, message, at))
        return entries


@attrs.define(slots=True)
class Template:
    """A v2 template and the ids of its builds."""

    id: str
    name: str
    description: str
    idc: str
    labels: dict[str, str]
    resources: dict[str, Any]
    created: float
    builds: list[str] = attrs.Factory(list)


@attrs.define(slots=True)
class IdempotencyRecord:
    """What an ``Idempotency-Key`` was first used for."""

    body: str
    template_id: str
    build_id: str
    created: float
    consumed: bool = False


@attrs.define(slots=True)
class _FailurePlan:
    code: str
    message: str


class ControlState:
    """Templates, builds and idempotency keys of the one emulated organization."""

    def __init__(self, clock: Callable[[], float], build_seconds: float) -> None:
        self.clock = clock
        self.build_seconds = build_seconds
        self.templates: dict[str, Template] = {}
        self.builds: dict[str, Build] = {}
        self.keys: dict[str, IdempotencyRecord] = {}
        self.template_quota: int | None = None
        self._seq = 0
        self._fail_next: list[_FailurePlan] = []

    def now(self) -> float:
        """The emulator clock's current value."""
        return float(self.clock())

    def lookup_key(self, key: str) -> IdempotencyRecord | None:
        """The live record of an idempotency key; expired keys are forgotten (free again)."""
        record = self.keys.get(key)
        if record is not None and self.now() - record.created >= IDEMPOTENCY_RETENTION:
            del self.keys[key]
            return None
        return record

    def create_template(
        self, request: dict[str, Any], idc: str, key: str, fingerprint: str
    ) -> tuple[Template, Build]:
        """Store a validated create request under ``key``.

        With ``build`` in the request (combined flow) the initial build starts now;
        without it (split flow) it stays ``waiting``. ``fingerprint`` is the canonical
        body a replay is compared with.
        """
        now = self.now()
        template = Template(
            id="tpl-" + secrets.token_hex(8),
            name=request["name"],
            description=request.get("description") or "",
            idc=idc,
            labels=dict(request.get("labels") or {}),
            resources=dict(request["resources"]),
            created=now,
        )
        self.templates[template.id] = template
        build_def = request.get("build") or {}
        build = self.add_build(template, "initial_build", build_def)
        if "build" in request:
            self.start(build)
        self.keys[key] = IdempotencyRecord(fingerprint, template.id, build.id, now)
        return template, build

    def add_build(self, template: Template, trigger: str, build_def: dict[str, Any]) -> Build:
        """A new waiting build of ``template``, its resources echoed from the template."""
        self._seq += 1
        resources = template.resources
        if resources["type"] == "preset":
            product = PRODUCT_BY_SKU[resources["product"]]
            echoed = {k: product[k] for k in ("cpu_count", "memory_mb", "disk_size_mb")}
            sku, label = product["product"], product["product_name"]
        else:
            echoed = {k: resources[k] for k in ("cpu_count", "memory_mb", "disk_size_mb")}
            sku = label = None
        echoed["architecture"] = resources.get("architecture", "x86_64")
        build = Build(
            id="bld-" + secrets.token_hex(8),
            template_id=template.id,
            seq=self._seq,
            trigger=trigger,
            created=self.now(),
            resources=echoed,
            source=dict(build_def.get("source") or {"image": "ubuntu:22.04"}),
            commands=list(build_def.get("commands") or []),
            start_cmd=build_def.get("start_cmd") or "",
            product=sku,
            product_name=label,
            idc=template.idc,
            duration=self.build_seconds,
        )
        self.builds[build.id] = build
        template.builds.append(build.id)
        return build

    def start(self, build: Build) -> None:
        """Start a waiting build now; it fails if a failure was queued."""
        build.started = self.now()
        build.duration = self.build_seconds
        if self._fail_next:
            plan = self._fail_next.pop(0)
            build.failure = {"code": plan.code, "message": plan.message}

    def fail_next_build(self, code: str, message: str) -> None:
        """Make the next started build fail with ``{code, message}``."""
        self._fail_next.append(_FailurePlan(code, message))

    def delete_template(self, template_id: str) -> None:
        """Erase a template and its builds; keys used to create it become consumed."""
        template = self.templates.pop(template_id)
        for build_id in template.builds:
            self.builds.pop(build_id, None)
        for record in self.keys.values():
            if record.template_id == template_id:
                record.consumed = True

    def builds_newest_first(self, template: Template) -> list[Build]:
        """The template's builds, newest first (creation order breaks clock ties)."""
        found = [self.builds[b] for b in template.builds if b in self.builds]
        return sorted(found, key=lambda b: (b.created, b.seq), reverse=True)
