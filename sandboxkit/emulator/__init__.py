"""An emulator of the whole service, on loopback, for tests without an account.

``Emulator`` runs two aiohttp.web servers on 127.0.0.1: the console (``/api/v1`` and
``/api/v2``) and the data plane, virtual-hosted by ``Host: {sandbox_key}.{domain}:PORT``.
It follows the service interface to the letter, error bodies included. Where the interface
says "not shown", the emulator makes the choices below; clients must not depend on them
beyond what the interface states.

Data-plane domain
    * Embedded (``Emulator()``), sandbox hosts are ``{key}.sandbox.test:PORT``: ``.test``
      never resolves on real DNS (RFC 6761), so only ``emu.resolver`` (which ``emu.client()``
      uses, and which refuses every other name) reaches them; code under test cannot reach
      a sandbox, or anything else, it was not wired to.
    * Standalone (``sandboxkit emulator``, ``python -m sandboxkit.emulator``,
      ``serve_forever``), they are ``{key}.localhost:PORT``: RFC 6761 makes ``localhost``
      and every name under it loopback, and curl, browsers and a ``sandboxkit.Client()``
      without ``resolver=`` answer them so without a lookup. ``Emulator(domain=...)``
      chooses; ``emu.resolver`` also answers ``localhost`` and ``*.localhost``.
    * With a CA, the certificate names ``*.{domain}``; under a one-label domain such as
      ``localhost``, where TLS clients refuse a wildcard, each sandbox host gets a
      certificate of its own when a client first names it (SNI).
    * The same 401 answers a ``Host`` outside the domain as an unknown sandbox.

Emulator-only routes (not the service's; under ``/_emulator`` on the console)
    * ``POST /_emulator/sandboxes`` (route ``emulator.sandboxes.create``), bearer-
      authenticated like v2, body ``{}`` or ``{"idc_name": ...}`` (or none): 201 and the
      body ``Emulator.create_sandbox`` returns. Errors are v2's (401, 400 for an unknown
      data center or field). ``request_sandbox(base_url, api_key)`` calls it.

Control plane v2
    * Template create answers 201; a replay (same ``Idempotency-Key``, same JSON body
      compared in canonical form) answers 201 with the same ids and
      ``Idempotency-Replayed: true``. Keys are kept 24 h by the emulator clock; a key whose
      Template was deleted (``Emulator.delete_template``) answers 409
      ``Sandbox.IdempotentKeyConsumed``. Unknown top-level fields are rejected (400); JSON
      ``null`` for an optional field counts as absent.
    * Split flow in a data center without it: 422 with code ``Parameter.Invalid``.
    * Build statuses: ``waiting`` (not started, or queued for the first tenth of
      ``build_seconds``), ``building``, then ``ready`` or ``failed``. ``artifact_state`` is
      ``absent`` until ``ready`` (then ``present``); ``started_at`` is when building
      began; ``finished_at`` and ``failure`` appear at the end. ``Emulator.add_builds``
      adds waiting builds with trigger ``rebuild``.
    * Build logs: ``limit`` defaults to 100. ``has_more`` is true exactly when entries exist
      beyond this page *now*; a running build emits more later (poll to follow). Successful
      builds log at all four levels (a non-fatal ``error`` line included).
    * Status map: Parameter.Invalid 400 (413 for a JSON body over 1 MiB), Auth.Unauthorized
      401, Resource.QuotaExceeded 403 with ``details`` (``Emulator.template_quota``),
      Resource.NotFound 404, Resource.StateConflict 409, Internal.ServerError 5xx, and the
      emulator's own ``Request.Throttled`` for 429 (the interface names no 429 code).
      Every v2 answer carries ``X-Request-ID`` equal to the body's ``request_id``
      (except raw answers injected with ``Fault.garbage`` or ``Fault.status(body=...)``).
    * ``GET /api/v2/products`` lists the preset catalog (``sku-small``, ``sku-medium``,
      ``sku-xlarge``).

Version 1
    * Successes: 200, except 201 for ``POST /organizations/{id}/api-keys`` and
      ``POST /containers``, whose body is ``{"ids": [uuid, ...], "result": "ok"}``.
    * Validation failures (missing or mistyped fields, non-UUID ids, malformed JSON,
      filters over length or pattern): 400 ``{group: "request", code: 0, validationDetail}``.
    * Missing or invalid bearer: 401 ``{group: "auth", code: 1100, message}``. Every valid
      token (the emulator key, OAuth access tokens, unexpired created API keys) works on
      every v1 and v2 operation.
    * OAuth: a bad or used code is 400 ``{group: "oauth", code: 1200}``; any non-empty
      ``provider`` is accepted. ``Emulator.oauth_code`` is one valid one-time code.
    * A missing record is 404 with code 2 and group ``organization`` (also for another
      organization's id), ``template``, ``container``, ``elastic_ip`` or ``vpc``.
      ``Emulator.break_org_reads()`` (or a 500 fault on that route) gives 500
      ``{group: "organization", code: 1201}``. An unknown v1 path is 404
      ``{group: "gateway", code: 404}``; injected statuses use group ``gateway`` and the
      status as code.
    * ``GET /images`` filters: ``name`` (case-insensitive substring, max 50) and
      ``os_series`` (exact ``OSSeries``, case-insensitive, max 256), both
      ``^[A-Za-z0-9._-]+$``; an empty value means no filter.
    * ``GET /templates`` returns a plain array; one record has an unusual shape (missing
      fields, unknown status ``archived``, extra keys).
    * Containers: ``count`` 1-100, ``idc`` a configured data center (``us-denver-1`` is
      always accepted), ``templateId`` a seeded v1 template (404 otherwise). An elastic IP
      associates only with an existing container.

Data plane
    * Error bodies are ``{"message": ...}`` only. The same 401 answers a missing,
      malformed, expired or foreign token and an unknown sandbox host; a deleted sandbox
      asked with its own token answers 404.
    * Downloading a directory is 400. Paths under ``/root`` are 403 unless
      ``username=root`` (in a data center that honours ``username``); the default user
      is ``user``. Multiple or malformed ``Range`` headers are ignored (200).
    * Uploads accept exactly one part named ``file``; any other field (``path``
      included) is 400, as is a truncated body (no file is left behind).
    * Headers over 16 KiB each or 64 KiB in all, and request targets over 16 KiB, are
      answered 400 in the surface's format.

Outages
    * ``Emulator.outage()`` takes both servers down for a block and brings them back,
      state kept; requests sent meanwhile are recorded on the ``Outage`` it yields.
"""

from ._admin import request_sandbox
from ._cli import BANNER_END, ListenError, describe_sandbox, main, serve_forever
from ._faults import Fault, FaultPlan
from ._outage import Outage, OutageRequest
from ._resolver import EmulatorResolver
from ._server import Emulator
from ._values import STANDALONE_IDCS, Idc, ManualClock, RecordedRequest

__all__ = [
    "BANNER_END",
    "STANDALONE_IDCS",
    "Emulator",
    "EmulatorResolver",
    "Fault",
    "FaultPlan",
    "Idc",
    "ListenError",
    "ManualClock",
    "Outage",
    "OutageRequest",
    "RecordedRequest",
    "describe_sandbox",
    "main",
    "request_sandbox",
    "serve_forever",
]
