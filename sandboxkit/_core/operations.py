"""The name of every operation, the one list the SDK and the emulator share.

An operation's name is what the SDK calls it in logs, errors and retry warnings, and what the
emulator calls the route serving it: `emu.faults.script(name, ...)` and `emu.journal_for(name)`
take it. Read a retry warning, script that name. Names read `resource.verb`; v1 ones start
with `v1.`. The emulator's routes no operation calls start with `emulator.` and live there.

Only names live here: the emulator imports this module and none of the SDK's request recipes,
so the paths and headers on each side stay independently written (ARCHITECTURE.md).
"""

from __future__ import annotations

__all__ = [
    "BUILDS_LIST",
    "BUILDS_LOGS",
    "BUILDS_START",
    "FILES_DOWNLOAD",
    "FILES_UPLOAD",
    "OPERATIONS",
    "TEMPLATES_CREATE",
    "V1_API_KEYS_CREATE",
    "V1_CONTAINERS_CREATE",
    "V1_CONTAINERS_DELETE",
    "V1_CONTAINERS_GET",
    "V1_CONTAINERS_SHELL",
    "V1_ELASTIC_IPS_ASSOCIATE",
    "V1_ELASTIC_IPS_RELEASE",
    "V1_IMAGES_LIST",
    "V1_OAUTH_EXCHANGE",
    "V1_ORGANIZATIONS_GET",
    "V1_TEMPLATES_GET",
    "V1_TEMPLATES_LIST",
    "V1_VPCS_RELEASE",
]

# Control plane v2.
TEMPLATES_CREATE = "templates.create"
BUILDS_LIST = "builds.list"
BUILDS_START = "builds.start"
BUILDS_LOGS = "builds.logs"

# Data plane (each sandbox's host).
FILES_DOWNLOAD = "files.download"
FILES_UPLOAD = "files.upload"

# Version 1.
V1_OAUTH_EXCHANGE = "v1.oauth.exchange"
V1_API_KEYS_CREATE = "v1.api_keys.create"
V1_ORGANIZATIONS_GET = "v1.organizations.get"
V1_IMAGES_LIST = "v1.images.list"
V1_TEMPLATES_GET = "v1.templates.get"
V1_TEMPLATES_LIST = "v1.templates.list"
V1_CONTAINERS_CREATE = "v1.containers.create"
V1_CONTAINERS_GET = "v1.containers.get"
V1_CONTAINERS_DELETE = "v1.containers.delete"
V1_CONTAINERS_SHELL = "v1.containers.shell"
V1_ELASTIC_IPS_ASSOCIATE = "v1.elastic_ips.associate"
V1_ELASTIC_IPS_RELEASE = "v1.elastic_ips.release"
V1_VPCS_RELEASE = "v1.vpcs.release"

OPERATIONS: tuple[str, ...] = (
    TEMPLATES_CREATE,
    BUILDS_LIST,
    BUILDS_START,
    BUILDS_LOGS,
    FILES_DOWNLOAD,
    FILES_UPLOAD,
    V1_OAUTH_EXCHANGE,
    V1_API_KEYS_CREATE,
    V1_ORGANIZATIONS_GET,
    V1_IMAGES_LIST,
    V1_TEMPLATES_GET,
    V1_TEMPLATES_LIST,
    V1_CONTAINERS_CREATE,
    V1_CONTAINERS_GET,
    V1_CONTAINERS_DELETE,
    V1_CONTAINERS_SHELL,
    V1_ELASTIC_IPS_ASSOCIATE,
    V1_ELASTIC_IPS_RELEASE,
    V1_VPCS_RELEASE,
)
