"""The ``lifespan`` scope: it passes through, and closes a limiter the middleware made."""

from __future__ import annotations

from typing import Final

from apf_limiter.asgi._types import Message, Send
from apf_limiter.limiter import Limiter

_LIFESPAN_ENDS: Final = frozenset({"lifespan.shutdown.complete", "lifespan.shutdown.failed"})


def closing_at_shutdown(send: Send, limiter: Limiter) -> Send:
    """Wrap a lifespan ``send`` to close ``limiter`` once the app reports its shutdown."""

    async def lifespan_send(message: Message) -> None:
        await send(message)
        if message["type"] in _LIFESPAN_ENDS:
            limiter.close()

    return lifespan_send
