"""The bounds the service's interface states on input, public: for a form, a schema or a
tool of your own to say what `sandboxkit` will check before sending.

`sandboxkit._core.validation` checks every argument against these before any request;
`sandboxkit.agents` writes them into its tools' JSON schemas, and the CLI into its help.
Pure data: no I/O, no imports.

Example::

    from sandboxkit import rules

    schema = {"type": "integer", "minimum": 1, "maximum": rules.MAX_CPU}
"""

from __future__ import annotations

__all__ = [
    "MAX_CPU",
    "MAX_DESCRIPTION",
    "MAX_DISK_MB",
    "MAX_IDEMPOTENCY_KEY",
    "MAX_IMAGE_FILTER",
    "MAX_LOG_LIMIT",
    "MAX_MEMORY_MB",
    "MAX_PAGE_SIZE",
    "MAX_TEMPLATE_NAME",
]

MAX_TEMPLATE_NAME = 64
"""Characters of a template's name (letters, digits, `_`, `-`), at least 1."""
MAX_IDEMPOTENCY_KEY = 64
"""Characters of an idempotency key (printable ASCII, no whitespace), at least 1."""
MAX_DESCRIPTION = 256
"""Characters of a template's description."""
MAX_CPU = 16
"""`CustomResources.cpu_count`, from 1."""
MAX_MEMORY_MB = 65536
"""`CustomResources.memory_mb`, from 1."""
MAX_DISK_MB = 65536
"""`CustomResources.disk_size_mb`, from 1."""
MAX_PAGE_SIZE = 100
"""Items in one page of a list (`page_size`), from 1."""
MAX_LOG_LIMIT = 100
"""Log entries one request returns (`limit`), from 1."""
MAX_IMAGE_FILTER = 256
"""Characters of an image filter (letters, digits, `.`, `_`, `-`)."""
