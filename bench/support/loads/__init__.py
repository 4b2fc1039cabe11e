"""Load generators the benchmarks (and some integration tests) drive the stack with: fleet
heartbeats, read-API clients, hostile clients, the learn benchmark's simulated stream."""
