"""The README tells a new user what they need (issue 28): extras, and what the demo measures."""

from __future__ import annotations

from pathlib import Path

from apf_limiter._demo.report import TABLE_NOTES

README = Path(__file__).resolve().parents[1] / "README.md"


def _section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_observability_section_names_the_prometheus_extra() -> None:
    section = _section("Observability")
    assert "pip install '.[prometheus]'" in section
    # The install line comes before the code that imports prometheus_client.
    assert section.index("[prometheus]") < section.index("PrometheusMetrics()")


def test_the_demo_output_shows_the_table_notes() -> None:
    section = _section("See it work: `make demo`")
    table_end = section.split("all mice   |", 1)[1].splitlines()[1:3]
    assert tuple(table_end) == TABLE_NOTES


def test_rolling_out_sets_a_real_server_limit_first_and_wires_the_metrics() -> None:
    text = (README.parent / "docs" / "rolling-out.md").read_text(encoding="utf-8")
    start = text.split("\n## 1. Start in shadow mode\n", 1)[1].split("\n## ", 1)[0]
    assert start.index("realistic `serverConcurrencyLimit`") < start.index("enforcement: Shadow")
    yaml_block = start.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert "serverConcurrencyLimit:" in yaml_block
    python_block = start.split("```python\n", 1)[1].split("```", 1)[0]
    for wiring in ("PrometheusMetrics()", "observer=metrics", "metrics.bind(limiter)", "/metrics"):
        assert wiring in python_block
    assert "[yaml,prometheus]" in start
