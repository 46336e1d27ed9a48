"""Telemetry collectors, each behind the small interface in ``sixdim.collectors.base``."""
