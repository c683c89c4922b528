"""The one piece of process-wide state: open brokers by directory.

Opening the same directory twice in one process returns handles onto the
same broker (reference counted), which is what lets consumers of one group
in different threads coordinate, and what keeps a process from locking
itself out of its own database. Keyed by (real path, readonly).
"""
import os
import threading

_lock = threading.Lock()
_open = {}  # key -> [broker, refcount]


def _key(path, readonly):
    return os.path.realpath(path), bool(readonly)


def acquire(path, readonly, make):
    """The broker open on path (readonly or not), made with make() if there is none."""
    key = _key(path, readonly)
    with _lock:
        entry = _open.get(key)
        if entry is None:
            entry = _open[key] = [make(), 0]
        entry[1] += 1
        return entry[0]


def release(broker):
    """Drop one reference; True when it was the last (the caller then closes the broker)."""
    with _lock:
        for key, entry in list(_open.items()):
            if entry[0] is broker:
                entry[1] -= 1
                if entry[1] == 0:
                    del _open[key]
                    return True
                return False
    return True


def open_count(path, readonly=False):
    with _lock:
        entry = _open.get(_key(path, readonly))
        return entry[1] if entry else 0
