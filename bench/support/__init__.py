"""What the benchmarks run on: the harness (stack context, reports, BENCHMARKS.md and
results.json), /proc readings, the load generators (`loads`) and the parts of single benchmarks
(`parts`, each named after the benchmark it serves)."""
