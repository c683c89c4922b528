"""A restarting broker's partition folders as it reconciles its topics with the
controller's (Cluster._sync_topics): a topic the controller deleted goes, with its folders;
one the controller cannot prove it deleted (its log lost) is set aside, every file kept,
as Kafka's LogManager moves a stray log aside (`<topic>-<partition>.<id>-stray`,
LogManager.asyncDelete(isStray = true): "Move aside stray partitions, don't delete them").
A second open of a live cluster's directory touches none of its files."""
import os

import pytest

from streamlog.cluster.cluster import Cluster
from streamlog.errors import DatabaseLockedError
from streamlog.storage import files

RECORDS = [b"kept-%d" % i for i in range(5)]


def _dirs(broker_root):
    return sorted(n for n in os.listdir(broker_root) if n.startswith("t-"))


def _segment_bytes(directory):
    with open(files.log_file(directory, 0), "rb") as f:
        return f.read()


def test_a_topic_the_controller_lost_is_set_aside_with_its_data(tmp_path):
    path = str(tmp_path / "c")
    with Cluster(1, path=path) as cluster:
        cluster.create_topic("t", 1, 1)
        cluster.produce("t", 0, RECORDS)
    # One file lost: the controller's metadata log. It proves no deletion of "t".
    os.remove(files.log_file(os.path.join(path, "controller", "__cluster_metadata-0"), 0))
    with Cluster(1, path=path) as cluster:
        assert "t" not in cluster.broker(0).topics()
    broker_root = os.path.join(path, "broker-0")
    (stray,) = _dirs(broker_root)   # the old code removed t-0 with its records
    assert stray.endswith(files.STRAY_DIR_SUFFIX)
    data = _segment_bytes(os.path.join(broker_root, stray))
    assert all(value in data for value in RECORDS)


def test_a_topic_deleted_or_recreated_while_a_broker_is_down_is_removed_there(tmp_path):
    path = str(tmp_path / "c")
    with Cluster(2, path=path) as cluster:
        cluster.create_topic("t", 1, 2)
        cluster.produce("t", 0, RECORDS)
        cluster.stop(1)
        cluster.delete_topic("t")
        cluster.restart(1)
        # The controller's tombstone proves the deletion: removed, nothing set aside.
        assert _dirs(os.path.join(path, "broker-1")) == []
        cluster.create_topic("t", 1, 2)
        old_id = cluster.broker(1).topic("t").topic_id
        cluster.stop(1)
        cluster.delete_topic("t")
        cluster.create_topic("t", 1, 2)
        cluster.restart(1)
        assert cluster.broker(1).topic("t").topic_id != old_id
        assert _dirs(os.path.join(path, "broker-1")) == ["t-0"]


def _files(directory):
    return {name: os.path.getsize(os.path.join(directory, name))
            for name in os.listdir(directory)}


def test_a_second_open_of_a_live_cluster_changes_none_of_its_controller_files(tmp_path):
    # Opening the controller's log recovers it (indexes rebuilt and trimmed, a tail that
    # looks torn cut): under a live controller that would rewrite a log in use. The old
    # code did so, then stopped at the first broker's lock.
    path = str(tmp_path / "c")
    controller_log = os.path.join(path, "controller", "__cluster_metadata-0")
    with Cluster(1, path=path) as cluster:
        cluster.create_topic("t", 1, 1)
        before = _files(controller_log)
        with pytest.raises(DatabaseLockedError) as refused:
            Cluster(1, path=path)
        assert _files(controller_log) == before
        assert "the cluster in" in str(refused.value)
        cluster.create_topic("u", 1, 1)
    with Cluster(1, path=path) as cluster:
        assert sorted(cluster.controller.topics) == ["t", "u"]
