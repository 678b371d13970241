"""Waiting in a queue while watching for the client to leave, under aiohttp.

aiohttp tells a handler of a disconnect in one of two ways, by the server's
``handler_cancellation`` setting (``web.run_app(..., handler_cancellation=True)``,
``web.AppRunner(app, handler_cancellation=True)``; off by default since aiohttp 3.8.6):

* **on**: aiohttp cancels the request's task as the connection is lost. A queued request's
  ``Ticket.wait()`` is cancelled with it, which takes it out of its queue; the cancellation
  goes on to aiohttp.
* **off**: nothing is cancelled, and the connection's state is the only sign. While a request
  waits in a queue (and only then), a timer looks at its transport every ``poll`` seconds;
  once it is gone or closing, the timer cancels the wait, which takes the request out of its
  queue, and the middleware answers 499 (which only the access log sees).

Either way the request holds nothing once it has left: no place in a queue, no seats.
"""

from __future__ import annotations

import asyncio
from typing import Final

from aiohttp import web

from apf_limiter.gate import Ticket

#: Seconds between two looks at a queued request's connection (``handler_cancellation`` off).
DISCONNECT_POLL: Final = 0.1


class _Watch:
    """A timer that cancels ``task`` once ``request``'s connection is gone."""

    __slots__ = ("request", "task", "poll", "handle", "fired")

    def __init__(self, request: web.BaseRequest, task: asyncio.Task[object], poll: float) -> None:
        self.request = request
        self.task = task
        self.poll = poll
        self.fired = False
        self.handle = asyncio.get_running_loop().call_later(poll, self.look)

    def look(self) -> None:
        transport = self.request.transport
        if transport is None or transport.is_closing():
            self.fired = True
            self.task.cancel()
        else:
            self.handle = asyncio.get_running_loop().call_later(self.poll, self.look)

    def stop(self) -> None:
        self.handle.cancel()


async def wait_watching_disconnect(request: web.BaseRequest, ticket: Ticket, poll: float) -> bool:
    """Wait in the queue until ``ticket`` holds its seats, or its client leaves.

    Args:
        request: The queued request.
        ticket: Its ticket, not admitted yet.
        poll: Seconds between two looks at its connection.

    Returns:
        ``True`` once admitted; ``False`` when the client left (the ticket holds nothing).

    Raises:
        Rejected: With reason ``time-out`` when the wait limit passed.
        CancelledError: Cancelled by anything else (a deadline, aiohttp, the server).
    """
    task = asyncio.current_task()
    assert task is not None  # aiohttp runs each request in a task of its own
    watch = _Watch(request, task, poll)
    try:
        await ticket.wait()
    except asyncio.CancelledError:
        # Ours alone (no other cancellation pending): the client left.
        if watch.fired and task.uncancel() == 0:
            ticket.abandon()
            return False
        raise
    finally:
        watch.stop()
    return True
