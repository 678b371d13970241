"""The in-process HTTP benchmark driver serves real responses, and its controls are honest."""

from __future__ import annotations

import asyncio

import pytest

from benchmarks.http_instructions import VARIANTS, drive


def _serve(variant: str) -> tuple[int, bytes]:
    async def main() -> tuple[int, bytes]:
        driver = await drive(variant, "h11", 40, connections=4, warmup=8)
        return driver.responses, driver.first_response

    return asyncio.run(main())


def _apf_headers(response: bytes) -> list[bytes]:
    head = response.split(b"\r\n\r\n", 1)[0].lower()
    return sorted(line for line in head.split(b"\r\n") if line.startswith(b"x-apf-"))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_variant_answers_every_request(variant: str) -> None:
    responses, first = _serve(variant)
    assert responses == 48
    assert first.startswith(b"HTTP/1.1 200 ")
    assert first.endswith(b"Hello, world!")


def test_the_headers_control_sends_exactly_what_apf_adds() -> None:
    apf = _apf_headers(_serve("apf")[1])
    assert apf == [b"x-apf-flow-schema: anonymous", b"x-apf-priority-level: workload-low"]
    assert _apf_headers(_serve("bare-2-headers")[1]) == apf
    assert _apf_headers(_serve("apf-no-headers")[1]) == []
    assert _apf_headers(_serve("bare")[1]) == []
