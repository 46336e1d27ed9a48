"""Exposing results: the board held in memory, the exporter and its cached exposition, and the HTTP
server with its web configuration (TLS, mutual TLS, basic auth)."""
