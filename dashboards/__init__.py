"""Grafana dashboards for sixdim, generated with grafanalib from the metric catalog."""
