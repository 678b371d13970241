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

A long-running response (an event stream, a WebSocket) has given its seats back and has no
deadline, so with ``handler_cancellation`` off nothing would end one whose client left until
its handler next writes, which an idle stream may never do, and it would keep its place under
``max_long_running`` all that time. From its start until its handler returns, the same timer
looks at its connection and, once it is gone, cancels the handler, as aiohttp does with
``handler_cancellation`` on (and as Go's HTTP server cancels a Kubernetes watch's context).
"""

from __future__ import annotations

import asyncio
from typing import Final

from aiohttp import web

from apf_limiter.gate import Ticket

#: Seconds between two looks at a watched connection (``handler_cancellation`` off).
DISCONNECT_POLL: Final = 0.1


class Watch:
    """A timer that cancels ``task`` once ``request``'s connection is gone.

    With ``ticket``: only once that long-running request's response started (its seats went
    back, its deadline ended); before that its deadline bounds it.
    """

    __slots__ = ("request", "task", "poll", "handle", "fired", "ticket")

    def __init__(
        self,
        request: web.BaseRequest,
        task: asyncio.Task[object],
        poll: float,
        ticket: Ticket | None = None,
    ) -> None:
        self.request = request
        self.task = task
        self.poll = poll
        self.fired = False
        self.ticket = ticket
        self.handle = asyncio.get_running_loop().call_later(poll, self.look)

    def look(self) -> None:
        transport = self.request.transport
        if (transport is None or transport.is_closing()) and (
            self.ticket is None or self.ticket.released
        ):
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
    watch = Watch(request, task, poll)
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
