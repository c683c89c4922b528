"""A power loss, simulated in-process for the segment files of a log root.

PowerLoss watches the three calls that make a segment's bytes durable: a log
file's fdatasync (FileRecords.flush), its cut (FileRecords.cut_to, which syncs
the copy it renames in), and an index's msync (SparseIndex.flush). It keeps
each file's contents as of that moment; lose() puts every segment file back to
them, as a power loss that drops the page cache would: a file never synced
comes back empty. keep_logs=True keeps the log files as they are (the kernel
wrote their pages back) and loses the index pages only.

The objects that had the root open must not be used after lose(): open it
again.
"""
import os

from streamlog.storage.file_records import FileRecords
from streamlog.storage.sparse_index import SparseIndex

SEGMENT_SUFFIXES = (".log", ".index", ".timeindex")


class PowerLoss:
    def __init__(self, monkeypatch, root):
        self.root = root
        self.durable = {}   # path -> bytes as of the file's last sync
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

    def _remember(self, path):
        with open(path, "rb") as f:
            self.durable[path] = f.read()

    def _segment_files(self):
        for directory, _, names in os.walk(self.root):
            for name in names:
                if name.endswith(SEGMENT_SUFFIXES):
                    yield os.path.join(directory, name)

    def lose(self, keep_logs=False):
        for path in list(self._segment_files()):
            if keep_logs and path.endswith(".log"):
                continue
            with open(path, "wb") as f:
                f.write(self.durable.get(path, b""))
