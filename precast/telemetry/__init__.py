"""What a process shows about itself: its /metrics, /healthz and /readyz endpoints
(`endpoints`), its heap gauges (`heap`), progress and summaries for long commands (`progress`),
and the objectives an operator is called in for (`objectives`, shared by the board's banner and
the generated Prometheus rules)."""
