"""The operations-center board: its page (static/), its endpoints and OpenAPI paths, what it
shows of a fleet (layout, fleet index, device view, history) and what it reads from Kafka
besides predictions (the board feed, lineage). See docs/board.md."""
