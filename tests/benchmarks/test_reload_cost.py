"""The reload cost benchmark (benchmarks/reload_cost.py) builds valid files and measures them."""

from __future__ import annotations

from apf_limiter.config._sources import load_file_content
from benchmarks.reload_cost import measure, schema_text


def test_the_generated_file_loads_with_every_schema() -> None:
    config = load_file_content(schema_text(30, "-x"), "apf.yaml")
    names = {schema.name for schema in config.flow_schemas}
    assert {f"schema-{i}" for i in range(30)} <= names
    assert len(config.flow_schemas) == 32  # with the mandatory exempt and catch-all


def test_a_small_run_reports_every_figure() -> None:
    result = measure(50)
    assert result["flow_schemas"] == 50
    assert set(result) == {
        "flow_schemas",
        "file_mib",
        "parse_s",
        "build_classifier_s",
        "peak_memory_added_mib",
        "apply_stall_s",
        "apply_stall_building_on_the_loop_s",
    }
    assert all(value >= 0 for value in result.values())
