"""The tamper-evident audit log's shared parts: RFC 6962/9162 Merkle hashing, the compact range,
inclusion and consistency proofs, signed checkpoints (C2SP tlog-checkpoint + signed note), the
canonical leaf of a predictions record, the durable SQLite log and its verification.

Shared because both the auditor service (`auditor/`, which writes the log) and the operator CLI
(`precast audit`, which checks it) use them; nothing here imports an application."""
