"""Shared adapters for precast: settings, Kafka and Redis clients, metrics, the local stack.

The applications (producers, workers, consumer_api) never import each other; they meet through
Kafka topics, `schemas` and this package. Only `precast.kafka` imports confluent_kafka.
"""

__version__ = "0.1.0"
