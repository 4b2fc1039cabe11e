"""HTTP serving shared by the read API and the auditor: the same connection, header and body
limits against hostile clients (backlog, connection ceiling, keep-alive, request-head deadline,
the idle-socket reaper), on granian or uvicorn. docs/api.md, "Capacity and hostile clients"."""
