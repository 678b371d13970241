"""Tests of apf-limiter simulate and replay."""
