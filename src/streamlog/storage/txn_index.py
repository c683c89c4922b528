"""A partition's aborted transactions: the `.txnindex` files and the lookups on them.

Kafka's TransactionIndex: every aborted transaction that wrote data to the
partition is one 34-byte entry in the `.txnindex` of the segment that holds its
ABORT marker (all big-endian):
    int16 version (0) | int64 producer id | int64 first offset |
    int64 last offset (the marker's) | int64 last stable offset
Last offsets strictly increase. The files are small and written rarely (one
entry per aborted transaction), so they hold no descriptor: an entry is
appended by open-write-fsync-close. All entries are also kept in memory, sorted
by last offset, loaded at open from the files the directory listing names.

Crash safety: an entry is made durable *before* its marker is appended, so a
marker in the log always has its entry. A crash between the two leaves an
entry whose marker is not in the log: after recovery the loader drops entries
at or above the log end (truncate_from), as it drops the tail they describe.

Thread-safety: changes come under the partition log's append lock; readers
(collect) take a reference to the current tuple, which is replaced, never
changed in place.
"""
import bisect
import os
import struct
from typing import NamedTuple

from ..errors import CorruptRecordError, KafkaStorageError
from . import files
from .durable import fsync_dir, read_whole

TXN_INDEX_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")  # 34 bytes


def write_index_file(path, txns):
    """A whole .txnindex file of txns (a cleaned segment's), fsynced."""
    try:
        with open(path, "wb") as f:
            f.write(b"".join(encode_entry(t) for t in txns))
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise KafkaStorageError(f"cannot write {path}: {exc}") from exc


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int         # the ABORT marker's offset
    last_stable_offset: int  # the LSO once the marker was written


def encode_entry(txn):
    return _ENTRY.pack(TXN_INDEX_VERSION, *txn)


def decode_entries(data, path=None):
    if len(data) % _ENTRY.size:
        raise CorruptRecordError(f"transaction index of {len(data)} bytes is not a whole "
                                 f"number of {_ENTRY.size}-byte entries", path)
    out = []
    for position in range(0, len(data), _ENTRY.size):
        version, *fields = _ENTRY.unpack_from(data, position)
        if version != TXN_INDEX_VERSION:
            raise CorruptRecordError(f"transaction index entry version {version}", path,
                                     position)
        txn = AbortedTxn(*fields)
        if out and txn.last_offset <= out[-1].last_offset:
            raise CorruptRecordError("transaction index last offsets do not increase", path,
                                     position)
        out.append(txn)
    return out


class TxnIndexes:
    """Every aborted transaction of one partition, by segment base offset."""

    def __init__(self, directory):
        self.directory = directory
        self._by_segment = {}   # segment base offset -> [AbortedTxn] in that segment's file
        self._files_read = {}   # read-only: segment base -> (inode, bytes) of its file read
        self._all = ()          # every entry, sorted by last offset (replaced, never mutated)
        self._last_offsets = ()

    def load(self, bases):
        """Read the .txnindex files of the segments at `bases` (those the listing named).
        Again later (a read-only view following the writer): a file read before is read
        again only if it grew or is another file (the cleaner's, of the same length); the
        entries of segments no longer named are dropped."""
        bases = set(bases)
        changed = False
        for base in list(self._by_segment):
            if base not in bases:
                del self._by_segment[base]
                self._files_read.pop(base, None)
                changed = True
        for base in bases:
            path = files.txn_index_file(self.directory, base)
            try:
                stat = os.stat(path)
                if base in self._by_segment and self._files_read.get(base) == \
                        (stat.st_ino, stat.st_size):
                    continue
                data = read_whole(path)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise KafkaStorageError(f"cannot read {path}: {exc}") from exc
            # A writer's entry being appended shows as a partial one: leave it for next time.
            data = data[:len(data) - len(data) % _ENTRY.size]
            self._by_segment[base] = decode_entries(data, path)
            self._files_read[base] = (stat.st_ino, len(data))
            changed = True
        if changed or not bases:
            self._rebuild()

    def _rebuild(self):
        entries = sorted((t for ts in self._by_segment.values() for t in ts),
                         key=lambda t: t.last_offset)
        self._all = tuple(entries)
        self._last_offsets = tuple(t.last_offset for t in entries)

    def __len__(self):
        return len(self._all)

    def entries(self):
        return list(self._all)

    def append(self, segment_base, txn):
        """Durably add one entry to the file of the segment that will hold its marker."""
        path = files.txn_index_file(self.directory, segment_base)
        if self._all and txn.last_offset <= self._all[-1].last_offset:
            raise KafkaStorageError(f"transaction index entry at {txn.last_offset} is not "
                                    f"above the last one ({self._all[-1].last_offset})")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, encode_entry(txn))
                os.fsync(fd)
            finally:
                os.close(fd)
            if segment_base not in self._by_segment:
                fsync_dir(self.directory)  # a new file: its name must survive a power loss
        except OSError as exc:
            raise KafkaStorageError(f"cannot append to {path}: {exc}") from exc
        self._by_segment.setdefault(segment_base, []).append(txn)
        self._rebuild()

    def collect(self, fetch_offset, upper_bound):
        """The aborted transactions a read_committed fetch from fetch_offset, bounded by
        upper_bound (the LSO), must be told of (Kafka's collectAbortedTxns): those with
        last offset >= fetch_offset and first offset < upper_bound, scanned in order of
        last offset up to and including the first whose LSO reaches upper_bound."""
        entries = self._all
        out = []
        for i in range(bisect.bisect_left(self._last_offsets, fetch_offset), len(entries)):
            txn = entries[i]
            if txn.first_offset < upper_bound:
                out.append(txn)
            if txn.last_stable_offset >= upper_bound:
                break
        return out

    def remember(self, txn):
        """An entry the writer made that this (read-only) view learnt from the log itself:
        kept in memory, with the ones read from files (the same entry is kept once)."""
        i = bisect.bisect_left(self._last_offsets, txn.last_offset)
        if i < len(self._all) and self._all[i].last_offset == txn.last_offset:
            return
        self._by_segment.setdefault(-1, []).append(txn)
        self._rebuild()

    def truncate_from(self, offset):
        """Drop the entries whose marker is at or above offset (a tail recovery cut off)."""
        for base, entries in list(self._by_segment.items()):
            kept = [t for t in entries if t.last_offset < offset]
            if len(kept) == len(entries):
                continue
            path = files.txn_index_file(self.directory, base)
            try:
                if kept:
                    with open(path, "r+b") as f:
                        f.truncate(len(kept) * _ENTRY.size)
                        os.fsync(f.fileno())
                    self._by_segment[base] = kept
                else:
                    os.remove(path)
                    del self._by_segment[base]
            except OSError as exc:
                raise KafkaStorageError(f"cannot truncate {path}: {exc}") from exc
        self._rebuild()

    def replace_segments(self, old_bases, new_entries):
        """The cleaner swapped segments in for old_bases; new_entries: {new base: the
        AbortedTxn its .txnindex holds}."""
        for base in old_bases:
            self._by_segment.pop(base, None)
        for base, txns in new_entries.items():
            if txns:
                self._by_segment[base] = list(txns)
        self._rebuild()

    def forget_segments(self, bases):
        """Retention removed these segments (their files go with them)."""
        for base in bases:
            self._by_segment.pop(base, None)
        self._rebuild()
