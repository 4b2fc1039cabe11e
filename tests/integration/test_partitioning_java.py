"""Our producer's partition for a device ID == the Java client's, computed by Kafka's own jars."""

import random
import subprocess
from pathlib import Path

from precast.kafka import Consumer, Producer, TopicPartitionOffset
from precast.kafka.consumer import OFFSET_BEGINNING
from schemas.partitioning import partition_for

JAVA_SRC = Path(__file__).parent.parent / "java" / "Murmur2Partitions.java"
PARTITIONS = 7  # prime and not the default, so a wrong modulus or hash cannot pass by luck


def device_ids(n: int = 1500) -> list[str]:
    rng = random.Random(20261129)
    ids = [f"dev-{i:06d}" for i in range(n // 3)]
    alphabet = "äöüßéñ漢字デバイス🚀Ωж"
    ids += [
        f"{i}-" + "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 24)))
        for i in range(n // 3)
    ]
    ids += [f"site-{i}:" + "x" * rng.randint(100, 400) + str(i) for i in range(n - 2 * (n // 3))]
    assert len(set(ids)) == len(ids)
    return ids


def java_partitions(stack, ids: list[str]) -> list[int]:
    run = subprocess.run(
        ["java", "-cp", f"{stack.kafka.libs}/*", str(JAVA_SRC), str(PARTITIONS)],
        input="\n".join(ids) + "\n",
        capture_output=True,
        text=True,
        encoding="utf-8",
        check=True,
        timeout=120,
    )
    return [int(x) for x in run.stdout.split()]


def test_python_murmur2_equals_java_client(stack):
    ids = device_ids()
    assert len(ids) >= 1000
    assert java_partitions(stack, ids) == [partition_for(i.encode(), PARTITIONS) for i in ids]


def test_records_land_on_the_java_partition(stack, kafka_settings, topic_factory, unique):
    ids = device_ids()
    expected = dict(zip(ids, java_partitions(stack, ids), strict=True))
    topic = topic_factory("placement", partitions=PARTITIONS)
    producer = Producer(kafka_settings)
    for device in ids:
        producer.produce(topic, device.encode(), b"{}")
    producer.flush()

    consumer = Consumer(kafka_settings, unique("placement"))
    consumer.assign([TopicPartitionOffset(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    seen: dict[str, int] = {}
    for _ in range(200):
        for m in consumer.consume(2000, 0.5):
            seen[m.key().decode()] = m.partition()
        if len(seen) == len(ids):
            break
    consumer.close()
    assert seen == expected
