"""Contracts shared by every precast component: events, predictions, topics, partitioning.

Pure: no I/O, no Kafka or Redis clients. Producers, workers, the read API and the SRE tools
import these instead of repeating names and shapes.
"""
