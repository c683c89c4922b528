"""A power loss, simulated in-process for the segment files of a log root.

PowerLoss watches the calls that make a segment's bytes durable: a log file's
fdatasync (FileRecords.flush), its cut (FileRecords.cut_to, which syncs the copy
it renames in), an index's msync (SparseIndex.flush), and any other fsync or
fdatasync of a segment file (a `.txnindex`'s appends, a cleaned one). It keeps
each file's contents as of that moment; lose() puts every segment file back to
them, as a power loss that drops the page cache would: a file never synced
comes back empty. keep_logs=True keeps the log files as they are (the kernel
wrote their pages back) and loses the index pages only. Segment files under a
temporary suffix (the cleaner's `.cleaned`, `.swap`, `.deleted`) count too, and
what was synced goes with a file when it is renamed (the bytes belong to the
file, not its name), and is forgotten when the file is removed. It also keeps,
per directory, the renames and removals made under root since the directory's
last fsync: put_back(undo=...) undoes them too, as a power loss before the file
system wrote them would (files created since are kept).

The objects that had the root open must not be used after lose(): open it
again.

die_at_sync() is the same watch in a child process that the power loss kills at a
chosen sync, with nothing after it run: files written whole and renamed in (snapshots,
checkpoints) exist exactly when their fsync came before the cut. The parent puts the
segment files back with put_back(); run_cut_writer() does all of it.
"""
import os
import pickle
import shutil
import signal
import subprocess
import sys
import threading

from streamlog.storage.file_records import FileRecords
from streamlog.storage.sparse_index import SparseIndex

SEGMENT_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")
# The names a segment file takes in a cleaner's swap (docs/COMPACTION.md, crash safety).
TEMPORARY_SUFFIXES = (".cleaned", ".swap", ".deleted")


class PowerLoss:
    def __init__(self, monkeypatch, root):
        self.root = os.path.abspath(root)
        self.durable = {}   # path -> bytes as of the file's last sync
        # directory -> its renames and removals since its last fsync, in order
        self.unsynced = {}
        for path in self._segment_files():
            self._remember(path)
        remember = self._remember
        flush, cut_to, index_flush = FileRecords.flush, FileRecords.cut_to, SparseIndex.flush

        def synced_flush(records):
            flush(records)
            remember(records.path)

        def synced_cut_to(records, size):
            removed = cut_to(records, size)
            remember(records.path)
            return removed

        def synced_index_flush(index):
            index_flush(index)
            if os.path.exists(index.path):
                remember(index.path)
        monkeypatch.setattr(FileRecords, "flush", synced_flush)
        monkeypatch.setattr(FileRecords, "cut_to", synced_cut_to)
        monkeypatch.setattr(SparseIndex, "flush", synced_index_flush)
        self._watch_names(monkeypatch)

    def _watch_names(self, monkeypatch):
        """Renames and removals: a file's synced bytes go with it; and what each directory
        had changed since its last fsync (self.unsynced), for put_back(undo=...)."""
        durable, unsynced, root = self.durable, self.unsynced, self.root + os.sep
        remember = self._remember

        def under_root(path, kwargs):
            return isinstance(path, str) and not kwargs and os.path.abspath(path).startswith(root)

        def renaming(real):
            def rename(src, dst, *args, **kwargs):
                watched = under_root(src, kwargs)
                replaced = _saved_bytes(durable, dst) if watched else None
                real(src, dst, *args, **kwargs)
                if not watched:
                    return
                src, dst = os.path.abspath(src), os.path.abspath(dst)
                if src in durable:
                    durable[dst] = durable.pop(src)
                else:
                    durable.pop(dst, None)   # the file that had the name is gone
                unsynced.setdefault(os.path.dirname(dst), []).append(
                    ("rename", src, dst, replaced))
            return rename

        def removing(real):
            def remove(path, *args, **kwargs):
                watched = under_root(path, kwargs)
                removed = _saved_bytes(durable, path) if watched else None
                real(path, *args, **kwargs)
                if watched:
                    path = os.path.abspath(path)
                    durable.pop(path, None)
                    unsynced.setdefault(os.path.dirname(path), []).append(
                        ("remove", path, removed))
            return remove
        for name in ("rename", "replace"):
            monkeypatch.setattr(os, name, renaming(getattr(os, name)))
        for name in ("remove", "unlink"):
            monkeypatch.setattr(os, name, removing(getattr(os, name)))

        def syncing(real):
            def sync(fd):
                real(fd)
                try:
                    path = os.readlink(f"/proc/self/fd/{fd if isinstance(fd, int) else fd.fileno()}")
                except OSError:
                    return
                if os.path.isdir(path):
                    unsynced.pop(path, None)   # its names are durable now
                elif _is_segment_file(path) and os.path.isfile(path):
                    remember(path)
            return sync
        for name in ("fsync", "fdatasync"):
            monkeypatch.setattr(os, name, syncing(getattr(os, name)))

    def _remember(self, path):
        with open(path, "rb") as f:
            self.durable[os.path.abspath(path)] = f.read()

    def _segment_files(self):
        return _segment_files(self.root)

    def lose(self, keep_logs=False):
        put_back(self.root, self.durable, keep_logs)


def _saved_bytes(durable, path):
    """What a power loss would find in the file at path, which is about to be replaced or
    removed: a segment file's synced bytes; another file's whole bytes (the library writes
    those whole and syncs them before they take their name); None when there is none."""
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        return None
    if _is_segment_file(path):
        return durable.get(path, b"")
    with open(path, "rb") as f:
        return f.read()


def put_back(root, durable, keep_logs=False, undo=None):
    """Every segment file under root as of its last sync in `durable` (path -> bytes);
    one never synced comes back empty. undo: {directory: [its renames and removals since
    its last fsync]} (PowerLoss.unsynced), undone first, last first: the power went before
    the file system wrote them (a journal keeps a prefix of them; this is the empty one).
    Files created since are kept."""
    if undo:
        durable = dict(durable)
        for changes in undo.values():
            for change in reversed(changes):
                _undo(change, durable)
    for path in list(_segment_files(root)):
        if keep_logs and _without_temporary_suffix(path).endswith(".log"):
            continue
        with open(path, "wb") as f:
            f.write(durable.get(os.path.abspath(path), b""))


def _undo(change, durable):
    if change[0] == "rename":
        _, src, dst, replaced = change
        if os.path.lexists(dst):
            os.rename(dst, src)
            if dst in durable:
                durable[src] = durable.pop(dst)
        restored = dst if replaced is not None else None
    else:
        _, restored, replaced = change
    if restored is not None and replaced is not None:
        with open(restored, "wb") as f:
            f.write(replaced)
        if _is_segment_file(restored):
            durable[restored] = replaced


def _without_temporary_suffix(name):
    for suffix in TEMPORARY_SUFFIXES:
        if name.endswith(suffix):
            return name[:-len(suffix)]
    return name


def _is_segment_file(name):
    return _without_temporary_suffix(name).endswith(SEGMENT_SUFFIXES)


def _segment_files(root):
    for directory, _, names in os.walk(root):
        for name in names:
            if _is_segment_file(name):
                yield os.path.join(directory, name)


class _Patcher:
    """The one method of pytest's monkeypatch that PowerLoss uses, for a process that
    has no pytest (a child that dies and is never undone)."""

    @staticmethod
    def setattr(target, name, value):
        setattr(target, name, value)


def die_at_sync(root, at, durable_path):
    """In a child process: watch root as PowerLoss does, and at the at-th sync (an
    fsync, fdatasync or index flush, counted from now; before it is made) write what
    was durable until then to durable_path (pickle: PowerLoss's durable and unsynced) and
    kill the process with SIGKILL: the power went at that moment. The parent then calls
    put_back(root, durable), or put_back(root, durable, undo=unsynced).
    Returns a function that dies the same way at once (a workload that ended first); its
    syncs() says how many syncs were counted so far."""
    power = PowerLoss(_Patcher, root)
    count = [0]
    dying = threading.Lock()   # never released: other threads' syncs wait for the end

    def die():
        dying.acquire()
        with open(durable_path, "wb") as f:
            pickle.dump((power.durable, power.unsynced), f)
        os.kill(os.getpid(), signal.SIGKILL)

    def gated(real):
        def call(*args):
            count[0] += 1
            if count[0] >= at:
                die()
            return real(*args)
        return call
    os.fsync, os.fdatasync = gated(os.fsync), gated(os.fdatasync)
    SparseIndex.flush = gated(SparseIndex.flush)
    die.syncs = lambda: count[0]
    return die


TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_cut_writer(script, root, cut, *args, undone=None):
    """Run `python -c script root cut durable_path *args`, a writer that calls
    die_at_sync(root, cut, durable_path) once ready (tests/ is on its sys.path); once the
    power has gone, put its segment files back. Returns the writer's whole output lines,
    split into fields (the cut may come while one is being printed).

    undone: a path; where the writer died with renames or removals that their directory
    had not synced, a copy of root is left there as the power loss that loses those too
    leaves it (put_back's undo); nothing is made there otherwise."""
    durable = root + ".durable"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [TESTS] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    child = subprocess.run([sys.executable, "-c", script, root, str(cut), durable,
                            *map(str, args)], capture_output=True, text=True, timeout=300,
                           env=env)
    assert child.returncode == -signal.SIGKILL, child.stderr
    with open(durable, "rb") as f:
        synced, unsynced = pickle.load(f)
    os.unlink(durable)
    if undone is not None and unsynced:
        shutil.copytree(root, undone)
        here, there = os.path.abspath(root), os.path.abspath(undone)
        put_back(undone, _rebased(synced, here, there), undo=_rebased(unsynced, here, there))
    put_back(root, synced)
    return [line.split() for line in child.stdout.split("\n")[:-1]]


def _rebased(value, root, other):
    """value (paths under root, in dicts, lists and tuples) with other for root."""
    if isinstance(value, str):
        return other + value[len(root):] if value.startswith(root + os.sep) else value
    if isinstance(value, dict):
        return {_rebased(k, root, other): _rebased(v, root, other) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_rebased(v, root, other) for v in value)
    return value
