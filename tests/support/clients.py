"""Kafka's client libraries set up as the wire tests need them: what a test must do so
that a client's own race does not decide its verdict."""


def kafka_python_group_consumer(topic, partitions, **config):
    """A kafka-python KafkaConsumer subscribed to `topic` in a group (config: its settings),
    which has learnt the topic's `partitions` (a count) before its first poll() joins. The
    brokers must be up: a refused connection raises out of the metadata fetch.

    A leader whose first assignment came before its metadata listed the topic rejoins once
    it does (its assignment snapshot differs from its metadata snapshot, as in Kafka's
    ConsumerCoordinator.rejoinNeededOrPending). kafka-python 3.0 loses that rejoin when a
    poll() times out between its JoinGroup and SyncGroup answers: the snapshots match again,
    its need_rejoin() is False, and no later poll takes the SyncGroup answer in, whereas
    Kafka's Java client goes on with a pending join (AbstractCoordinator's
    rejoinNeededOrPending is rejoinNeeded || joinFuture != null). That member keeps its
    previous assignment and never heartbeats again, and the group waits for it until its
    session times out. A leader that knows the topic before it joins has no cause for that
    rejoin.
    """
    import kafka
    consumer = kafka.KafkaConsumer(topic, **config)
    known = consumer.partitions_for_topic(topic)
    assert known == set(range(partitions)), f"{topic!r} has partitions {sorted(known)}"
    return consumer
