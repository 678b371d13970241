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
