"""The pure core: what the service's wire means, and the rules the layers above follow.

Protocol facts (paths, headers, statuses), the operations table, option values, conversion,
answers, retry rules, validation, cursors, resume and slice rules, bounds, event records and
proxy rules. Nothing here awaits, and nothing imports aiohttp, anyio or asyncio
(`tests/test_structure.py` checks both): every module can be read, and tested, as plain
functions and values. Imports go to `errors`, `models` and each other only.
"""

__all__: list[str] = []
