"""What the applications share. The applications (`producers`, `workers`, `consumer_api`,
`auditor`, `opsctl`) never import each other; they meet through Kafka topics, `schemas` (the
pure contracts) and this package, which imports no application.

Rooms:
- `kafka/`: the only importer of confluent_kafka (clients, admin, ACLs and SCRAM users);
- `serving/`: the serving store (Redis, memory), its entries and validity leases;
- `fleet/`: a fleet spec compiled (context reducer, snapshots, features, outcomes) and the
  simulator of any spec;
- `models/`: the model registry's layout on disk;
- `audit/`: the Merkle log shared by the auditor and `precast audit`;
- `http/`: the HTTP server and its hostile-client limits;
- `telemetry/`: /metrics and probes, heap gauges, progress lines, the operator's objectives;
- loose modules, one concern each: `settings` (the settings models; one object per process),
  `runtime` (logging, one-line failures), `errors`, `guard` (the one decode boundary),
  `supervise` (background restarts), `deadletter`, `presence`, `tokens`, `hygiene` (outside
  text into logs), `files` (secret files), `redis_client`.
"""

__version__ = "0.1.0"
