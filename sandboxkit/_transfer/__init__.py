"""The transfer engines: a sandbox's data plane, and how files go down and up over it.

The plane (one sandbox host's requests), downloads (one stream, and in slices), bounded
reads, uploads, in-place writes, sinks and partial files with their sidecars. It imports
`_http` and `_core`; the public resources (`resources/files.py`) are thin over it.
"""

__all__: list[str] = []
