"""The only place confluent_kafka is imported. Everything else uses these wrappers and the
plain types in `precast.kafka.types`."""

from precast.kafka.admin import Admin, GroupInfo, PartitionReplicas, TopicReport
from precast.kafka.consumer import OFFSET_BEGINNING, OFFSET_END, Consumer
from precast.kafka.errors import DeliveryFailed, EmptyKeyError, KafkaFailure
from precast.kafka.producer import Producer
from precast.kafka.retry import SETTLING_CODES, is_settling, retry_settling
from precast.kafka.types import Headers, KafkaMessage, Record, RecordRef, TopicPartitionOffset

__all__ = [
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "SETTLING_CODES",
    "Admin",
    "Consumer",
    "DeliveryFailed",
    "EmptyKeyError",
    "GroupInfo",
    "Headers",
    "KafkaFailure",
    "KafkaMessage",
    "PartitionReplicas",
    "Producer",
    "Record",
    "RecordRef",
    "TopicPartitionOffset",
    "TopicReport",
    "is_settling",
    "retry_settling",
]
