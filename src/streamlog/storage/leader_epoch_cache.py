"""A partition's leader epoch history: which epoch's leader wrote from which offset.

Each entry (epoch, start offset) says that the leader of `epoch` appended its first batch
at `start offset`. A replicated partition keeps them in `leader-epoch-checkpoint` beside
its segments, in Kafka's text format: line 1 the version `0`, line 2 the entry count, then
one `<epoch> <start offset>` line per entry, epochs and start offsets both ascending.

What it answers: the end offset of an epoch (the start of the next one; the log end for
the latest), which is how a follower that may hold batches its old leader never
replicated finds where its log and the new leader's part (KIP-101), and truncates there.

Rules (Kafka's LeaderEpochFileCache):
  - assign(epoch, start): ignored for a negative epoch or when the latest entry is the same
    epoch starting at or before `start`; otherwise every entry with an epoch >= `epoch` or
    a start >= `start` is dropped first, so both columns stay ascending.
  - truncate_from_end(end): the log was cut at `end`; entries starting at or after it go.
  - truncate_from_start(start): the log start moved to `start`; of the entries starting at
    or below it only the newest stays, starting at `start`.
  - end_offset_for(epoch, log_end): see the method.
  - epoch_for_offset(offset): the epoch of the entry covering offset (Kafka's
    epochForOffset; a ListOffsets answer's leader epoch).

Every change is written at once (atomically, fsynced) before it is relied on: a crash
leaves the old list or the new one, and recovery then cuts entries above the recovered
log end. A missing or unreadable file is rebuilt from the batches' partitionLeaderEpoch
fields by the caller (rebuild()).
"""
import bisect
import os

from ..errors import KafkaStorageError
from .durable import write_atomically
from .files import LEADER_EPOCH_CHECKPOINT

VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, directory, entries=None):
        """entries: start from these [(epoch, start offset)] and write no file until a change;
        None: read the directory's file (absent or unreadable: empty, see `loaded`)."""
        self.path = os.path.join(directory, LEADER_EPOCH_CHECKPOINT)
        self.loaded = True  # False: the file was missing or unreadable (rebuild from the log)
        if entries is None:
            entries = self._read()
        self._epochs = [e for e, _ in entries]
        self._starts = [s for _, s in entries]

    # --- file -------------------------------------------------------------------

    def _read(self):
        try:
            with open(self.path, encoding="ascii") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            self.loaded = False
            return []
        except (OSError, UnicodeDecodeError) as exc:
            raise KafkaStorageError(f"cannot read {self.path}: {exc}") from exc
        try:
            if int(lines[0]) != VERSION:
                raise ValueError(f"unknown version {lines[0]!r}")
            count = int(lines[1])
            entries = [tuple(int(x) for x in line.split(" ")) for line in lines[2:]]
            if len(entries) != count or any(len(e) != 2 for e in entries):
                raise ValueError(f"expected {count} '<epoch> <offset>' lines")
            if any(a[0] >= b[0] or a[1] > b[1] for a, b in zip(entries, entries[1:], strict=False)):
                raise ValueError("entries are not ascending")
        except (ValueError, IndexError):
            # Written atomically, so only outside damage gets here: the batches still say
            # which epoch wrote them, and the caller rebuilds the list from them.
            self.loaded = False
            return []
        return entries

    def _write(self):
        lines = [str(VERSION), str(len(self._epochs))]
        lines += [f"{e} {s}" for e, s in zip(self._epochs, self._starts, strict=True)]
        write_atomically(self.path, ("\n".join(lines) + "\n").encode("ascii"))

    # --- reads ------------------------------------------------------------------

    @property
    def entries(self):
        return list(zip(self._epochs, self._starts, strict=True))

    @property
    def latest_epoch(self):
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def start_offset_of(self, epoch):
        """Where epoch began, or None if it never wrote here."""
        i = bisect.bisect_left(self._epochs, epoch)
        return self._starts[i] if i < len(self._epochs) and self._epochs[i] == epoch else None

    def epoch_for_offset(self, offset):
        """The epoch whose leader wrote `offset`: that of the latest entry starting at or
        below it (UNDEFINED_EPOCH below the first), as Kafka's epochForOffset."""
        i = bisect.bisect_right(self._starts, offset) - 1
        return self._epochs[i] if i >= 0 else UNDEFINED_EPOCH

    def end_offset_for(self, epoch, log_end_offset):
        """(epoch, end offset) as Kafka's OffsetsForLeaderEpoch answers a follower asking
        about `epoch`: the latest epoch ends at the log end; an older one at the start of the
        first newer epoch, answered with the largest epoch <= the one asked (or the one asked,
        if it is older than all); an unknown newer epoch or -1 gives (-1, -1)."""
        if epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == self._epochs[-1]:
            return epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs, epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        floor_epoch = self._epochs[higher - 1] if higher else epoch
        return floor_epoch, self._starts[higher]

    # --- changes ----------------------------------------------------------------

    def assign(self, epoch, start_offset):
        """The leader of epoch wrote its first batch at start_offset (see the module doc)."""
        if epoch < 0:
            return False
        if self._epochs and self._epochs[-1] == epoch and start_offset >= self._starts[-1]:
            return False
        keep = len(self._epochs)
        while keep and (self._epochs[keep - 1] >= epoch or self._starts[keep - 1] >= start_offset):
            keep -= 1
        self._epochs = self._epochs[:keep] + [epoch]
        self._starts = self._starts[:keep] + [start_offset]
        self._write()
        return True

    def truncate_from_end(self, end_offset):
        """The log now ends at end_offset: forget epochs that began at or after it."""
        keep = bisect.bisect_left(self._starts, end_offset)
        if keep < len(self._starts):
            del self._epochs[keep:]
            del self._starts[keep:]
            self._write()

    def truncate_from_start(self, start_offset):
        """The log now starts at start_offset: the epoch holding it starts there."""
        covering = bisect.bisect_right(self._starts, start_offset) - 1
        if covering < 0 or (covering == 0 and self._starts[0] == start_offset):
            return
        self._epochs = self._epochs[covering:]
        self._starts = [start_offset] + self._starts[covering + 1:]
        self._write()

    def rebuild(self, batches):
        """Replace the entries by those the batches' partitionLeaderEpoch fields give (the
        file was missing or damaged); batches: the log's batches in offset order."""
        self._epochs, self._starts = [], []
        for batch in batches:
            epoch = batch.partition_leader_epoch
            if epoch >= 0 and (not self._epochs or epoch > self._epochs[-1]):
                self._epochs.append(epoch)
                self._starts.append(batch.base_offset)
        self._write()
        self.loaded = True
