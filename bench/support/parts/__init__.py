"""Pieces of one benchmark each, named after it (`api_*` for `bench api`, `cluster_*` for
`bench cluster`, ...): the measuring runs, their processes, probes and reports, and the frozen
reference code `bench fleets` measures against."""
