"""The sans-IO core: no asyncio, no clock reads, no logging, no I/O."""

__all__: list[str] = []
