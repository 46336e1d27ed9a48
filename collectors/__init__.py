"""Telemetry collectors, each behind the small interface in ``collectors.base``."""
