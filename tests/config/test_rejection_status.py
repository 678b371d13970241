"""The rejection status per priority level (issue 28, item 7): ``rejectionStatus`` and
``priorityLevelRejectionStatus`` are loaded, dumped, shown by ``apf-limiter show`` and carried
on ``Rejected.status``."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from apf_limiter import Limiter, Rejected, RequestDigest
from apf_limiter._cli import main
from apf_limiter.config import dump_config, load_config
from apf_limiter.testing import FakeClock
from tests.helpers import single_level_config


def test_the_default_is_429_and_a_level_may_answer_503() -> None:
    assert load_config({}).rejection_status_of("catch-all") == 429
    config = load_config({**single_level_config(), "priorityLevelRejectionStatus": {"test": 503}})
    assert config.rejection_status_of("test") == 503
    assert config.rejection_status_of("catch-all") == 429
    server_wide = load_config({**single_level_config(), "rejectionStatus": 503})
    assert server_wide.rejection_status_of("catch-all") == 503


@pytest.mark.parametrize("form", ["short", "kubernetes"])
def test_it_survives_a_dump(form: str) -> None:
    config = load_config(
        {
            **single_level_config(),
            "rejectionStatus": 503,
            "priorityLevelRejectionStatus": {"test": 429},
        }
    )
    assert load_config(dump_config(config, form=form)) == config
    assert "rejectionStatus" not in dump_config(load_config({}))  # the default is left out


def test_show_prints_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "apf.json"
    path.write_text(
        json.dumps({**single_level_config(), "priorityLevelRejectionStatus": {"test": 503}})
    )
    assert main(["show", str(path)]) == 0
    assert "Rejection status: 429 (503: test)\n" in capsys.readouterr().out


async def test_a_rejection_carries_its_levels_status() -> None:
    config = {**single_level_config(limit=1, reject=True), "rejectionStatus": 503}
    limiter = Limiter(config, clock=FakeClock())
    async with limiter.admit(RequestDigest(user="a")):
        with pytest.raises(Rejected) as rejected:
            async with limiter.admit(RequestDigest(user="b")):
                pass
    assert rejected.value.status == 503
    assert pickle.loads(pickle.dumps(rejected.value)).status == 503
    refused = limiter.refuse("everyone", "test", "long-running-limit", retry_after=1)
    assert refused.status == 503
    assert Rejected("queue-full", priority_level="p", flow_schema="s", retry_after=1).status == 429


def test_a_reload_logs_the_change() -> None:
    from apf_limiter.config._changes import configuration_changes

    old = load_config(single_level_config())
    new = load_config({**single_level_config(), "priorityLevelRejectionStatus": {"test": 503}})
    assert configuration_changes(old, new) == ["priority level test rejection status 429 -> 503"]
    server_wide = load_config({**single_level_config(), "rejectionStatus": 503})
    assert configuration_changes(old, server_wide) == ["rejection status 429 -> 503"]
