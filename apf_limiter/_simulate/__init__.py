"""``apf-limiter simulate`` and ``replay``: a traffic through the real engine, in fake time.

A discrete-event loop (:mod:`._run`) drives the sans-IO controller through its entry points
(``start``, ``finish``, ``release``, ``cancel``, ``open_level``, ``adjust_borrowing``), with
the shell's timers (the queue wait limit, borrowing every ``borrowingPeriod``, final seats) as
events, so each request sees the wait, rejection and Retry-After the live limiter would give it.
"""
