"""``apf-limiter simulate`` and ``replay`` through ``main([...])``: reports, errors, bounds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from apf_limiter._cli import main
from apf_limiter._simulate._replay import MAX_LINE
from apf_limiter._simulate._run import Simulation
from apf_limiter._simulate._scenario import ScenarioError, parse_scenario
from apf_limiter._simulate._sources import scenario_sources
from apf_limiter.config import load_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "simulate"

SMALL = {
    "serverConcurrencyLimit": 10,
    "requestWaitLimit": 2,
    "borrowingPeriod": 1,
    "priorityLevels": [
        {
            "name": "web",
            "type": "Limited",
            "limited": {
                "nominalConcurrencyShares": 10,
                "limitResponse": {
                    "type": "Queue",
                    "queuing": {"queues": 8, "handSize": 2, "queueLengthLimit": 5},
                },
            },
        }
    ],
    "flowSchemas": [
        {
            "name": "web",
            "priorityLevelConfiguration": {"name": "web"},
            "matchingPrecedence": 500,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [
                {
                    "subjects": [{"kind": "Group", "group": {"name": "*"}}],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }
            ],
        }
    ],
}

FLOOD = {
    "duration": 30,
    "seed": 4,
    "flows": [
        {
            "name": "flood",
            "user": "bulk",
            "rate": 40,
            "service": {"distribution": "exponential", "mean": 0.5},
        },
        {"name": "mice", "user": "m-{i}", "users": 5, "rate": 5, "service": 0.05},
    ],
}


def _files(tmp_path: Path, scenario: Any = FLOOD, config: Any = SMALL) -> tuple[str, str]:
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps(config))
    traffic = tmp_path / "traffic.json"
    traffic.write_text(json.dumps(scenario))
    return str(config_file), str(traffic)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_simulate_prints_levels_schemas_flows_and_borrowing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, traffic = _files(tmp_path)
    status, out, err = _run(capsys, "simulate", config, traffic)
    assert status == 0, err
    for title in (
        "Priority levels:",
        "Flow schemas:",
        "Traffic flows:",
        "Heaviest flows:",
        "Borrowing over time",
    ):
        assert title in out
    assert "queue-full (Retry-After" in out or "time-out (Retry-After" in out
    assert "bulk" in out  # the heaviest flow


def test_simulate_json_is_the_same_for_the_same_seed_and_names_every_outcome(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, traffic = _files(tmp_path)
    status, first, _ = _run(capsys, "simulate", config, traffic, "--json")
    assert status == 0
    _, second, _ = _run(capsys, "simulate", config, traffic, "--json")
    assert first == second
    report = json.loads(first)
    flood, mice = report["flows"]["flood"], report["flows"]["mice"]
    assert flood["requests"] == flood["served"] + sum(flood["rejected"].values())
    assert flood["rejected"] and flood["wait_p99"] > mice["wait_p99"]
    assert all(int(seconds) >= 1 for values in flood["retry_after"].values() for seconds in values)
    assert report["heaviest_flows"][0]["distinguisher"] == "bulk"
    assert len(report["borrowing"]) >= 30 and report["borrowing"][1]["levels"]["web"]["limit"] > 0
    other_seed = dict(FLOOD, seed=5)
    config, traffic = _files(tmp_path, other_seed)
    _, third, _ = _run(capsys, "simulate", config, traffic, "--json")
    assert third != first


def test_compare_sets_two_configurations_side_by_side(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, traffic = _files(tmp_path)
    bigger = tmp_path / "bigger.json"
    bigger.write_text(json.dumps(dict(SMALL, serverConcurrencyLimit=200)))
    status, out, err = _run(capsys, "simulate", config, traffic, "--compare", str(bigger), "--json")
    assert status == 0, err
    both = json.loads(out)
    assert both["a"]["flows"]["flood"]["rejected"] and not both["b"]["flows"]["flood"]["rejected"]
    # The same open-loop traffic through both.
    assert both["a"]["flows"]["flood"]["requests"] == both["b"]["flows"]["flood"]["requests"]
    status, out, _ = _run(capsys, "simulate", config, traffic, "--compare", str(bigger))
    assert "SERVED A" in out and "P99 B" in out and f"B: {bigger}" in out


def test_plot_needs_the_plot_extra_or_writes_a_png(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, traffic = _files(tmp_path)
    png = tmp_path / "plot.png"
    status, _, err = _run(capsys, "simulate", config, traffic, "--plot", str(png))
    assert status == 0
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "pip install 'apf_limiter[plot]'" in err and not png.exists()
    else:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_bad_scenario_names_every_field_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = {
        "duration": -1,
        "flows": [
            {"name": "a", "rate": "fast", "service": {"distribution": "gamma"}, "colour": 1},
            {
                "name": "a",
                "clients": 2,
                "think": {"distribution": "uniform", "min": 2, "max": 1},
                "service": 0.1,
            },
            {"name": "c", "service": 0.1},
        ],
    }
    config, traffic = _files(tmp_path, scenario)
    status, out, err = _run(capsys, "simulate", config, traffic)
    assert status == 1 and out == ""
    for expected in (
        "duration: must be greater than 0",
        "flows[0].rate: must be a number, got 'fast'",
        "flows[0].service.distribution: must be one of constant, exponential, lognormal, uniform",
        "flows[0].colour: unknown field",
        "flows[1].name: duplicate flow name 'a'",
        "flows[1].think.max: must not be below min (2), got 1",
        "flows[2]: sends nothing: give rate, clients or bursts",
        "invalid scenario, nothing simulated",
    ):
        assert expected in err, expected
    with pytest.raises(ScenarioError, match="flows: must be a non-empty list"):
        parse_scenario({"flows": []})


def test_an_invalid_configuration_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, traffic = _files(tmp_path, config={"serverConcurrencyLimit": -3})
    status, _, err = _run(capsys, "simulate", config, traffic)
    assert status == 1 and "invalid configuration, nothing simulated" in err


def test_a_missing_file_is_named_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config, traffic = _files(tmp_path)
    missing = str(tmp_path / "missing.yaml")
    status, _, err = _run(capsys, "simulate", config, missing)
    assert status == 1
    assert err.splitlines()[0] == f"{missing}: cannot read: No such file or directory"
    status, _, err = _run(capsys, "simulate", missing, traffic)
    assert status == 1
    assert err.startswith(f"{missing}: cannot read the file: No such file or directory")
    assert f"{missing}: {missing}" not in err
    huge = tmp_path / "huge.json"
    huge.write_text(" " * (2 << 20))
    status, _, err = _run(capsys, "simulate", config, str(huge))
    assert status == 1 and err.splitlines()[0] == f"{huge}: larger than {1 << 20} bytes"


def test_closed_loop_clients_send_one_request_at_a_time() -> None:
    scenario = parse_scenario(
        {
            "duration": 50,
            "flows": [
                {
                    "name": "browsers",
                    "user": "b-{i}",
                    "users": 4,
                    "clients": 4,
                    "think": 1.0,
                    "service": 0.25,
                },
            ],
        }
    )
    result = Simulation(load_config(SMALL)).run(scenario_sources(scenario))
    (tally,) = result.tallies.values()
    # Each client: a request every 1.25 s (0.25 s running, 1 s thinking), for 50 s.
    assert 4 * 39 <= tally.served <= 4 * 41
    assert not tally.rejected and max(tally.waits) == 0.0


def test_service_times_that_grow_with_load_make_requests_wait_longer() -> None:
    def p99(per_request: float) -> float:
        scenario = parse_scenario(
            {
                "duration": 30,
                "flows": [
                    {
                        "name": "web",
                        "user": "u-{i}",
                        "users": 10,
                        "rate": 15,
                        "service": {
                            "distribution": "constant",
                            "value": 0.2,
                            "perRequest": per_request,
                        },
                    },
                ],
            }
        )
        result = Simulation(load_config(SMALL)).run(scenario_sources(scenario))
        waits = sorted(w for tally in result.tallies.values() for w in tally.waits)
        return waits[int(len(waits) * 0.99)]

    assert p99(0.0) < 0.1  # 3 seats in use on average: seldom waits long
    assert p99(0.2) > 1.0  # 1 + 0.2 per running request: the server slows, queues build


def _log(tmp_path: Path, lines: list[str]) -> str:
    path = tmp_path / "access.log"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_replay_reads_json_lines_with_mapped_fields_and_shows_unreadable_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, _ = _files(tmp_path)
    lines = [
        json.dumps(
            {
                "ts": 1000.0 + i * 0.05,
                "took_ms": 800,
                "who": "bulk",
                "verb": "GET",
                "url": "/api/x?page=2",
            }
        )
        for i in range(200)
    ]
    lines.insert(3, "{not json")
    lines.insert(10, json.dumps({"ts": 1, "who": "x", "verb": "GET", "url": "/"}))
    lines.insert(20, json.dumps({"ts": 1, "took_ms": -5, "who": "x", "verb": "GET", "url": "/"}))
    log = _log(tmp_path, lines)
    status, out, err = _run(
        capsys,
        "replay",
        config,
        log,
        "--json",
        "--field",
        "start=ts",
        "--field",
        "duration=took_ms",
        "--duration-unit",
        "ms",
        "--field",
        "user=who",
        "--field",
        "method=verb",
        "--field",
        "path=url",
    )
    assert status == 0, err
    assert "203 lines, 200 requests read, 3 unreadable" in err
    assert (
        f"{log}:4: unreadable" in err
        and f"{log}:11: unreadable: no duration field 'took_ms'" in err
    )
    assert f"{log}:21: unreadable: duration" in err
    report = json.loads(out)
    # 20 a second of 0.8 s on 10 seats: 16 seats wanted, so one user's requests queue.
    assert report["requests"] == 200 and report["flow_schemas"]["web"]["wait_p99"] > 0


def test_replay_reads_the_combined_log_format_with_a_request_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, _ = _files(tmp_path)
    lines = [
        f'10.0.0.{i % 7} - user{i % 3} [10/Oct/2026:13:55:{i % 60:02d} +0000] "GET /api/{i} '
        f'HTTP/1.1" 200 512 "-" "curl/8" 0.{i % 9 + 1}'
        for i in range(60)
    ]
    lines.append("garbage")
    log = _log(tmp_path, lines)
    status, out, err = _run(capsys, "replay", config, log, "--format", "combined", "--json")
    assert status == 0, err
    assert "61 lines, 60 requests read, 1 unreadable" in err
    assert f"{log}:61: unreadable: not in the combined log format" in err
    assert json.loads(out)["flows"]["log"]["served"] == 60


def test_replay_refuses_a_field_that_a_combined_line_does_not_have(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, _ = _files(tmp_path)
    line = '10.0.0.7 bob alice [10/Oct/2026:13:55:36 +0000] "GET /a HTTP/1.1" 200 5 "-" "c" 0.1'
    log = _log(tmp_path, [line])
    # A misspelt field read nothing: every request would quietly have been anonymous.
    status, out, err = _run(
        capsys, "replay", config, log, "--format", "combined", "--field", "user=usr"
    )
    assert status == 2 and out == ""
    assert "a combined log line has no field 'usr'; its fields are host, ident, user" in err
    status, out, err = _run(
        capsys, "replay", config, log, "--format", "combined", "--field", "user=ident", "--json"
    )
    assert status == 0, err
    assert [flow["distinguisher"] for flow in json.loads(out)["heaviest_flows"]] == ["bob"]


def test_replay_bounds_each_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config, _ = _files(tmp_path)
    good = json.dumps({"start": 0, "duration": 0.1, "user": "a", "method": "GET", "path": "/"})
    path = tmp_path / "huge.log"
    path.write_text(good + "\n" + '{"user": "' + "x" * (3 * MAX_LINE) + '"}\n' + good + "\n")
    status, _, err = _run(capsys, "replay", config, str(path), "--json")
    assert status == 0
    assert "3 lines" not in err and "2 requests read, 1 unreadable" in err
    assert f":2: unreadable: longer than {MAX_LINE} bytes" in err


def test_replay_refuses_a_bad_field_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, _ = _files(tmp_path)
    log = _log(tmp_path, [])
    status, _, err = _run(capsys, "replay", config, log, "--field", "colour=red")
    assert status == 2 and "ROLE one of start, duration" in err
    status, _, err = _run(capsys, "replay", config, log)
    assert status == 1 and "no request to replay" in err


def test_the_worked_example_finds_the_flood_and_the_fix_ends_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # docs/simulate.md, shortened to 30 s of traffic: the built-in configuration lets acme's
    # many users crowd every queue; the example configuration gives acme its own level.
    import yaml

    document = yaml.safe_load((EXAMPLES / "flooding-tenant.yaml").read_text())
    document["duration"] = 30
    scenario = parse_scenario(document)
    before = Simulation(load_config({})).run(scenario_sources(scenario))
    after = Simulation(load_config(str(EXAMPLES / "tenant-acme.yaml"))).run(
        scenario_sources(scenario)
    )

    def beta(result: Any) -> tuple[int, int]:
        tallies = [t for (flow, _, _), t in result.tallies.items() if flow == "beta-users"]
        return sum(t.served for t in tallies), sum(sum(t.rejected.values()) for t in tallies)

    served, rejected = beta(before)
    assert rejected > 0.05 * (served + rejected)
    served, rejected = beta(after)
    assert rejected == 0 and served > 5000


def test_the_page_shows_the_messages_the_commands_print(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # docs/simulate.md quotes a scenario problem and a combined log line: they must stay true.
    page = (Path(__file__).resolve().parents[2] / "docs" / "simulate.md").read_text()
    config, traffic = _files(
        tmp_path,
        {
            "flows": [
                {"rate": 1, "service": 0.1, "perRequest": 1},
                {"rate": 1, "service": {"distribution": "exponential", "mean": -1}},
            ]
        },
    )
    status, _, err = _run(capsys, "simulate", config, traffic)
    assert status == 1
    for problem in err.splitlines()[:2]:
        assert f"`{problem.removeprefix(traffic + ': ')}`" in page, problem
    line = page.split("as in\n  `", 1)[1].split("`", 1)[0]
    status, out, err = _run(
        capsys, "replay", config, _log(tmp_path, [line]), "--format", "combined", "--json"
    )
    assert status == 0 and "1 requests read, 0 unreadable" in err
    assert json.loads(out)["heaviest_flows"][0]["distinguisher"] == "alice"


def test_replay_stops_at_its_request_cap_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import apf_limiter._simulate._replay as replay

    monkeypatch.setattr(replay, "MAX_REQUESTS", 5)
    config, _ = _files(tmp_path)
    line = json.dumps({"start": 0, "duration": 0.1, "user": "a", "method": "GET", "path": "/"})
    status, out, err = _run(capsys, "replay", config, _log(tmp_path, [line] * 9), "--json")
    assert status == 0 and "stopped after 5 requests" in err
    assert json.loads(out)["requests"] == 5
