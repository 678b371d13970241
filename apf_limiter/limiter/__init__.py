"""The async shell: :class:`Limiter` and :class:`Admission`, one concept per module.

``_limiter`` is the public API, holding its ``_core`` (the request path: arrive, queue,
finish, abandon, reject, and acting on the engine's effects); ``_admission`` one request's
phases; ``_scheduler`` the one scheduler of periodic work, whose jobs are ``_adjustments``
(borrowing with catch-up, lost-loop recovery, final seats), ``_reload`` (the configuration
file) and ``_adapting`` (the adaptive limit); ``_reporter`` observer events and logs;
``_shadow`` the virtual twins of shadow mode. The public names are re-exported by
:mod:`apf_limiter`.
"""

from apf_limiter.limiter._admission import Admission as Admission
from apf_limiter.limiter._admission import Phase as Phase
from apf_limiter.limiter._limiter import Limiter as Limiter
from apf_limiter.limiter._limiter import check_wait_limit as check_wait_limit
from apf_limiter.limiter._shadow import ShadowOutcome as ShadowOutcome
