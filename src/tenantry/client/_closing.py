"""``with`` (``async with``) for what must be closed: the clients and the event streams.
Each leaving of the block closes it, as ``close()`` (``aclose()``) would."""

from __future__ import annotations

from typing import Self


class Closing:
    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncClosing:
    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
