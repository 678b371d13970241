"""The async shell: :class:`Limiter` and :class:`Admission`, split by job.

``_limiter`` is the public API and the wiring, ``_admission`` one request's phases,
``_scheduler`` the timers (borrowing with catch-up, lost-loop recovery, final seats),
``_reporter`` observer events and logs, ``_reload`` the configuration file, ``_shadow`` the
virtual twins of shadow mode. The public names
are re-exported by :mod:`apf_limiter`.
"""

from apf_limiter.limiter._admission import Admission as Admission
from apf_limiter.limiter._admission import Phase as Phase
from apf_limiter.limiter._limiter import Limiter as Limiter
from apf_limiter.limiter._limiter import check_wait_limit as check_wait_limit
from apf_limiter.limiter._shadow import ShadowOutcome as ShadowOutcome
