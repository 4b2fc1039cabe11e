"""Decide: the speculation policy (`policy`), and where decided work waits (`routing.WorkQueue`
over the micro-batcher `batching` and the requests waiting for data `awaiting`). Imports only
`state` among the stages."""
