"""Score: a batch of waiting devices -> features, one inference call, top-K
(`scorer.Scorer`) and the encoded PredictionSets (`encode`). Imports `state`, `decide`, and
`ingest` (trace IDs of the input records)."""
