"""The auditor: appends every predictions record to a tamper-evident Merkle log (RFC 6962),
signs a checkpoint at least every second and serves checkpoints and proofs (docs/audit.md)."""
