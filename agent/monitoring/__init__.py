"""Monitoring as code: the Prometheus alert rules and the PromQL they share with the dashboards."""
