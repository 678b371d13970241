"""Tests of the ``apf-limiter`` command (validate, show) through ``main([...])``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from apf_limiter._cli import main
from apf_limiter._errors import ConfigError
from apf_limiter.config._sources import load_config

GOOD_YAML = """\
serverConcurrencyLimit: 100
priorityLevels:
  - name: workload-high
    type: Limited
    limited:
      nominalConcurrencyShares: 40
      lendablePercent: 50
      limitResponse: {type: Queue, queuing: {queues: 128, handSize: 6, queueLengthLimit: 50}}
flowSchemas:
  - name: b-users
    priorityLevelConfiguration: {name: workload-high}
    matchingPrecedence: 500
    distinguisherMethod: {type: ByHeader, header: x-tenant-id}
    rules:
      - subjects: [{kind: Group, group: {name: system:authenticated}}]
        nonResourceRules: [{verbs: [get, head], nonResourceURLs: [/api/*, /healthz]}]
  - name: a-users
    priorityLevelConfiguration: {name: workload-high}
    matchingPrecedence: 500
    rules:
      - subjects:
          - {kind: User, user: {name: alice}}
          - {kind: ServiceAccount, serviceAccount: {namespace: ns1, name: "*"}}
        resourceRules:
          - {verbs: [get], apiGroups: [""], resources: [pods], namespaces: [team-a]}
"""

BAD_YAML = """\
serverConcurrencyLimit: 0
priorityLevels:
  - name: workload-high
    type: Limited
    limited:
      nominalConcurrencyShares: 40
      lendablePercent: 150
      limitResponse: {type: Queue, queuing: {queues: 512, handSize: 8, queueLengthLimit: 50}}
flowSchemas:
  - name: api-users
    priorityLevelConfiguration: {name: nope}
    matchingPrecedence: 500
    rules:
      - subjects: [{kind: Group, group: {name: system:authenticated}}]
        nonResourceRules: [{verbs: ["*"], nonResourceURLs: ["/api/*"]}]
"""

GOOD_JSON = {
    "priorityLevels": [
        {
            "name": "batch",
            "type": "Limited",
            "limited": {"nominalConcurrencyShares": 10, "limitResponse": {"type": "Reject"}},
        }
    ],
}


@pytest.fixture
def good_file(tmp_path: Path) -> str:
    path = tmp_path / "good.yaml"
    path.write_text(GOOD_YAML, encoding="utf-8")
    return str(path)


@pytest.fixture
def bad_file(tmp_path: Path) -> str:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD_YAML, encoding="utf-8")
    return str(path)


def _rows(text: str) -> dict[str, list[str]]:
    """Map the first cell of every table line to its whitespace-separated cells."""
    return {line.split()[0]: line.split() for line in text.splitlines() if line.strip()}


def _level_rows(text: str) -> dict[str, list[str]]:
    """The level table's rows, without the last column (ENFORCEMENT: see its own test)."""
    levels_part = text.split("Priority levels", 1)[1].split("Flow schemas", 1)[0]
    rows = _rows(levels_part.split("\n", 1)[1])  # past the title
    assert rows["NAME"][-1] == "ENFORCEMENT"
    return {name: row[:-1] for name, row in rows.items()}


def _schema_lines(text: str) -> list[str]:
    lines = text.split("Flow schemas", 1)[1].splitlines()
    return [line for line in lines[2:] if line.strip()]  # past the title and the header


# -- validate -------------------------------------------------------------------------------------


def test_validate_good_file(good_file: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", good_file]) == 0
    out = capsys.readouterr().out.splitlines()
    # The mandatory exempt and catch-all objects are added to the one level and two schemas.
    assert out == [
        f"{good_file}: OK (3 priority levels, 4 flow schemas; enforcement Enforce)",
        "1 file checked: all valid",
    ]


def test_validate_bad_file_prints_every_problem(
    bad_file: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(bad_file)
    problems = info.value.problems
    assert len(problems) >= 4

    assert main(["validate", bad_file]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[:-1] == [f"{bad_file}: {problem.path}: {problem.message}" for problem in problems]
    assert out[-1] == f"1 file checked: 0 valid, 1 invalid ({len(problems)} problems)"
    text = "\n".join(out)
    assert f"{bad_file}: serverConcurrencyLimit: " in text
    assert "must be between 0 and 100, inclusive" in text
    assert "required entropy bits of deckSize 512 and handSize 8" in text
    assert '"nope"' in text


def test_validate_several_files(
    good_file: str, bad_file: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    json_file = tmp_path / "good.json"
    json_file.write_text(json.dumps(GOOD_JSON), encoding="utf-8")
    missing = str(tmp_path / "missing.yaml")
    bad_count = len(_problems_of(bad_file))

    assert main(["validate", good_file, bad_file, str(json_file), missing]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{good_file}: OK (3 priority levels, 4 flow schemas; enforcement Enforce)"
    assert all(line.startswith(f"{bad_file}: ") for line in out[1 : 1 + bad_count])
    assert (
        out[1 + bad_count]
        == f"{json_file}: OK (3 priority levels, 2 flow schemas; enforcement Enforce)"
    )
    assert out[2 + bad_count] == f"{missing}: cannot read the file: {_not_found(missing)}"
    assert out[3 + bad_count] == (f"4 files checked: 2 valid, 2 invalid ({bad_count + 1} problems)")
    assert len(out) == 4 + bad_count


def _not_found(path: str) -> str:
    return (
        f"No such file or directory (looked for {os.path.abspath(path)}; the working "
        f"directory is {os.getcwd()})"
    )


def _problems_of(path: str) -> tuple[str, ...]:
    try:
        load_config(path)
    except ConfigError as error:
        return tuple(str(problem) for problem in error.problems)
    return ()


def test_validate_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "nowhere.yaml")
    assert main(["validate", missing]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"{missing}: cannot read the file: {_not_found(missing)}",
        "1 file checked: 0 valid, 1 invalid (1 problem)",
    ]


def test_validate_unparsable_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{not json", encoding="utf-8")
    assert main(["validate", str(path)]) == 1
    first = capsys.readouterr().out.splitlines()[0]
    # The file name appears once, not once as prefix and again as the problem's path.
    assert first.startswith(f"{path}: invalid JSON at line 1")


def test_validate_needs_a_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate"]) == 2
    assert "the following arguments are required: FILE" in capsys.readouterr().err


# -- show -----------------------------------------------------------------------------------------


def test_show_default_configuration_at_600(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[:4] == [
        "Configuration: built-in default configuration",
        "Server concurrency limit: 600   share sum: 245   nominal limit sum: 602",
        # 602 nominal seats + half a seat for each of the 3 limited levels, rounded down.
        "Most requests running at once: 603 (plus exempt ones; the server limit is a target, "
        "not a cap)",
        "Request wait limit: 15s   borrowing period: 10s",
    ]
    rows = _level_rows(out)
    assert rows["NAME"][:3] == ["NAME", "TYPE", "SHARES"]
    assert rows["exempt"] == ["exempt", "Exempt", "0", "0", "0", "0", "600", "-", "-"]
    assert rows["catch-all"] == [
        "catch-all", "Limited-Reject", "5", "13", "0", "13", "613", "-", "-",
    ]  # fmt: skip
    # 600 * 150 / 245 = 367.3 -> 368; lendable 50 % = 184; maxSeats min(ceil(55.2), 368 // 6)
    assert rows["global-default"] == [
        "global-default", "Limited-Queue", "150", "368", "184", "184", "968", "56", "128/6/50",
    ]  # fmt: skip
    # 600 * 90 / 245 = 220.4 -> 221; lendable 198.9 -> 199; maxSeats min(ceil(33.15), 36)
    assert rows["workload-low"] == [
        "workload-low", "Limited-Queue", "90", "221", "199", "22", "821", "34", "128/6/50",
    ]  # fmt: skip


def test_show_default_configuration_at_24(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "--server-concurrency-limit", "24"]) == 0
    out = capsys.readouterr().out
    assert "Server concurrency limit: 24   share sum: 245   nominal limit sum: 25" in out
    rows = _level_rows(out)
    assert rows["exempt"][3:7] == ["0", "0", "0", "24"]
    assert rows["catch-all"][3:7] == ["1", "0", "1", "25"]
    # 24 * 150 / 245 = 14.7 -> 15; 7.5 lendable rounds half away from zero to 8
    assert rows["global-default"][3:9] == ["15", "8", "7", "39", "2", "128/6/50"]
    assert rows["workload-low"][3:9] == ["9", "8", "1", "33", "1", "128/6/50"]


def test_show_default_schemas_in_matching_order(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show"]) == 0
    lines = _schema_lines(capsys.readouterr().out)
    assert [line.split()[1] for line in lines] == [
        "exempt",
        "probes",
        "anonymous",
        "global-default",
        "catch-all",
    ]
    probes = lines[1].split()
    assert probes[:4] == ["2", "probes", "exempt", "-"]
    assert lines[1].endswith("groups *; GET,HEAD /healthz,/readyz,/livez,/health,/metrics")


def test_show_file(good_file: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", good_file]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"Configuration: {good_file}\n")
    assert "Server concurrency limit: 100   share sum: 45   nominal limit sum: 101" in out
    rows = _level_rows(out)
    # Levels in configuration order: a missing exempt goes first, a missing catch-all last.
    assert list(rows) == ["NAME", "exempt", "workload-high", "catch-all"]
    # 100 * 40 / 45 = 88.9 -> 89; lendable 44.5 -> 45 (half away from zero); upper 89 + 100
    assert rows["workload-high"] == [
        "workload-high", "Limited-Queue", "40", "89", "45", "44", "189", "14", "128/6/50",
    ]  # fmt: skip
    assert rows["catch-all"][3:7] == ["12", "0", "12", "112"]
    lines = _schema_lines(out)
    assert [line.split()[:2] for line in lines] == [
        ["1", "exempt"],
        ["500", "a-users"],  # same precedence: by name
        ["500", "b-users"],
        ["10000", "catch-all"],
    ]
    assert lines[1].split()[2:4] == ["workload-high", "-"]
    assert lines[1].endswith('users alice + service accounts ns1/*; get pods group "" (ns team-a)')
    assert lines[2].split()[3] == "ByHeader(x-tenant-id)"
    assert lines[2].endswith("groups system:authenticated; GET,HEAD /api/*,/healthz")


def test_show_file_with_server_limit_override(
    good_file: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", good_file, "-c", "600"]) == 0
    rows = _level_rows(capsys.readouterr().out)
    # 600 * 40 / 45 = 533.3 -> 534; lendable 267; maxSeats min(ceil(80.1), 534 // 6 = 89)
    assert rows["workload-high"][3:8] == ["534", "267", "267", "1134", "81"]


def test_show_invalid_file(bad_file: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", bad_file]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.splitlines()
    assert len(err) == len(_problems_of(bad_file)) + 1
    assert all(line.startswith(f"{bad_file}: ") for line in err)
    assert err[-1] == f"{bad_file}: invalid configuration, nothing to show"


@pytest.mark.parametrize("value", ["0", "-3", "many"])
def test_show_rejects_bad_server_limit(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", f"--server-concurrency-limit={value}"]) == 2
    assert "--server-concurrency-limit" in capsys.readouterr().err


# -- the command itself ---------------------------------------------------------------------------


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    err = capsys.readouterr().err
    assert "validate" in err
    assert "show" in err


def test_version_and_help_exit_zero(capsys: pytest.CaptureFixture[str]) -> None:
    from apf_limiter import __version__

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"apf-limiter {__version__}"
    assert main(["show", "--help"]) == 0
    assert "--server-concurrency-limit" in capsys.readouterr().out


def test_unknown_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["frobnicate"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_installed_script_smoke(good_file: str) -> None:
    script = Path(sys.executable).parent / "apf-limiter"
    if not script.exists():
        pytest.skip(f"console script not installed at {script} (run `pip install -e .`)")
    result = subprocess.run(
        [str(script), "validate", good_file],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "1 file checked: all valid"


def test_show_notes_levels_with_a_lower_limit_of_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "--server-concurrency-limit", "10"]) == 0
    out = capsys.readouterr().out
    assert "Notes:" in out
    assert "workload-low: lower limit 0" in out
    assert main(["show"]) == 0
    assert "Notes:" not in capsys.readouterr().out


def test_plan_notes_for_reject_and_jail_levels() -> None:
    from apf_limiter._plan_render import plan_notes
    from apf_limiter.engine._concurrency import plan_configuration

    config = load_config(
        {
            "serverConcurrencyLimit": 10,
            "priorityLevels": [
                {
                    "name": "lender",
                    "limited": {
                        "nominalConcurrencyShares": 10,
                        "lendablePercent": 100,
                        "limitResponse": {"type": "Reject"},
                    },
                },
                {
                    "name": "jail",
                    "limited": {"nominalConcurrencyShares": 0, "borrowingLimitPercent": 0},
                },
            ],
        }
    )
    notes = plan_notes(plan_configuration(config))
    assert any(n.startswith("lender: lower limit 0 on a Reject level") for n in notes)
    assert any(n.startswith("jail: no nominal seats") and "admits nothing" in n for n in notes)


def test_show_workers_states_the_seats_per_process_and_in_total(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["show", "--workers", "4", "-c", "100"]) == 0
    lines = capsys.readouterr().out.splitlines()
    workers = [line for line in lines if line.startswith("Workers:")]
    assert len(workers) == 1
    assert "100 seats per process, 400 in total" in workers[0]
    assert main(["show"]) == 0
    assert not any(line.startswith("Workers:") for line in capsys.readouterr().out.splitlines())
    assert main(["show", "--workers", "0"]) == 2


# -- the mode, everywhere (issue 28, item 2) -------------------------------------------------------

_MODES = """\
enforcement: Shadow
priorityLevelEnforcement:
  global-default: Enforce
adaptiveConcurrency:
  minLimit: 4
  maxLimit: 64
"""


def test_validate_and_show_name_the_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "modes.yaml"
    file.write_text(_MODES, encoding="utf-8")
    assert main(["validate", str(file)]) == 0
    validated = capsys.readouterr().out.splitlines()
    assert validated[0] == (
        f"{file}: OK (4 priority levels, 5 flow schemas; "
        "enforcement Shadow (Enforce: global-default))"
    )
    assert main(["show", str(file)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "Enforcement: Shadow (Enforce: global-default)" in lines
    assert (
        "Adaptive concurrency: Gradient 4..64, update every 1s, tolerance 1.2 "
        "(learning starts from the server limit)"
    ) in lines
    levels_part = out.split("Priority levels", 1)[1].split("Flow schemas", 1)[0]
    rows = _rows(levels_part.split("\n", 1)[1])
    assert {name: row[-1] for name, row in rows.items()} == {
        "NAME": "ENFORCEMENT",
        "exempt": "Shadow",
        "catch-all": "Shadow",
        "global-default": "Enforce",
        "workload-low": "Shadow",
    }


def test_show_says_when_everything_enforces_and_nothing_adapts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["show"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "Enforcement: Enforce" in lines
    assert "Adaptive concurrency: off" in lines
