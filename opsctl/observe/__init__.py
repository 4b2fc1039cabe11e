"""Observability as code: SLO recording and alert rules, Grafana dashboards (`precast observe`)."""
