"""The producer-state snapshots of segments a cleaning pass merges away.

A roll takes a producer snapshot named by the new segment's base offset. When the
cleaner swaps a group's cleaned segment in for several old ones, Kafka deletes the
snapshots of the old segments that leave the log (UnifiedLog.replaceSegments calls
deleteProducerSnapshots with the deleted segments, which removes each one's snapshot at
its base offset); without that, a compacted log, whose start never moves, would keep
one snapshot per roll for ever."""
import streamlog
from streamlog.storage import files


def test_a_pass_deletes_the_snapshots_of_the_segments_it_merges_away(tmp_path):
    db = streamlog.open(str(tmp_path / "db"), config={"log.cleaner.enable": False})
    db.create_topic("c", partitions=1, config={"cleanup.policy": "compact",
                                               "segment.bytes": 1024})
    producer = db.producer(acks="all", linger_ms=0)
    for _ in range(2):   # the second pass merges the segments the first one made small
        for i in range(40):
            producer.send("c", key=b"k%d" % (i % 3), value=b"v" * 100, partition=0).result()
        db.compact("c")
    producer.close()
    listing = files.list_directory(str(tmp_path / "db" / files.partition_dir_name("c", 0)))
    db.close()
    merged_away = set(range(5, 40, 5))   # five records to a segment: rolls at 5, 10, ...
    assert merged_away.isdisjoint(listing.bases), listing.bases   # the pass merged them
    left = sorted(merged_away & set(listing.snapshot_offsets))
    assert not left, f"snapshots of segments merged away: {left}"
