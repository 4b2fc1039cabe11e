"""Ingest: records in. The heartbeat wire structs and their checks (`heartbeat_structs`,
`struct_builder`, `metadata`), the decoders (`decode`, `lowrate`, `trace`), the vectorized
heartbeat path (`heartbeats.HeartbeatIngest`) and the router by topic role (`router.Ingest`).
Imports `state` and `decide`."""
