"""The one module that knows the names and suffixes of files in a log directory.

Segment files are named by their base offset printed as 20 zero-padded
decimal digits; partition directories as `<topic>-<partition>` (parsed at the
last '-'). Temporary suffixes are appended after the normal one:
`.cleaned` (cleaner output), `.swap` (being swapped in), `.deleted`
(scheduled for deletion). Anything that builds or parses such a name calls
this module.
"""
import os
import re
from typing import NamedTuple

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
TMP_SUFFIX = ".tmp"

SEGMENT_FILE_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
CLEAN_SHUTDOWN_MARKER = ".clean-shutdown"
LOCK_FILE = "LOCK"
# The files a database root holds besides partition directories: a root holding only these
# (or nothing) is one whose first open stopped before its metadata log was made.
_ROOT_FILES = (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, CLEANER_OFFSET_CHECKPOINT,
               CLEAN_SHUTDOWN_MARKER)
ROOT_FILES = frozenset((LOCK_FILE,) + _ROOT_FILES + tuple(n + TMP_SUFFIX for n in _ROOT_FILES))
# Per partition: the topic id the directory belongs to (Kafka's PartitionMetadataFile).
PARTITION_METADATA_FILE = "partition.metadata"
# Per partition: the topic's name, id and configs, so `streamlog repair` can rebuild a topic's
# metadata from its directories. The library's own file; Kafka ignores files it does not know.
TOPIC_CONFIG_FILE = "topic.json"
# Per replicated partition: which leader epoch began at which offset (Kafka's name and format,
# storage/leader_epoch_cache.py).
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"

# A directory being deleted: `<topic>-<partition>.<32 hex digits>-delete`, the topic cut
# short so the name fits the file system's 255-byte limit (Kafka's LocalLog.logDeleteDirName).
DELETE_DIR_SUFFIX = "-delete"
# A directory set aside, its files kept: `<topic>-<partition>.<32 hex digits>-stray` (Kafka's
# LocalLog.logStrayDirName). No open reads it as a partition or removes it.
STRAY_DIR_SUFFIX = "-stray"
MAX_FILE_NAME_BYTES = 255
_DELETE_DIR_NAME = re.compile(r"^[a-zA-Z0-9._-]*-\d+\.[0-9a-f]{32}-delete$")

_OFFSET_NAME = re.compile(r"^(\d{20})(\.[a-z]+)((?:\.[a-z]+)?)$")
# Kafka's legal topic characters; names are validated before a directory is made.
_TOPIC_CHARS = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME_LENGTH = 249


def offset_prefix(offset):
    """The 20-digit zero-padded file name prefix for a base offset."""
    return f"{offset:020d}"


def _in(directory, name):
    # os.path.join without its checks: a partition directory has tens of thousands of
    # segment files to name at open.
    return f"{directory}{name}" if directory.endswith(os.sep) or not directory else \
        f"{directory}{os.sep}{name}"


def log_file(directory, base_offset, suffix=""):
    return _in(directory, f"{base_offset:020d}{LOG_SUFFIX}{suffix}")


def offset_index_file(directory, base_offset, suffix=""):
    return _in(directory, f"{base_offset:020d}{INDEX_SUFFIX}{suffix}")


def time_index_file(directory, base_offset, suffix=""):
    return _in(directory, f"{base_offset:020d}{TIME_INDEX_SUFFIX}{suffix}")


def txn_index_file(directory, base_offset, suffix=""):
    return _in(directory, f"{base_offset:020d}{TXN_INDEX_SUFFIX}{suffix}")


def snapshot_file(directory, offset):
    return os.path.join(directory, offset_prefix(offset) + SNAPSHOT_SUFFIX)


def parse_segment_file_name(name):
    """(base_offset, suffix, temp_suffix) for a segment-related file name, else None.

    '00000000000000000042.index.swap' -> (42, '.index', '.swap').
    """
    m = _OFFSET_NAME.match(name)
    if not m:
        return None
    return int(m.group(1)), m.group(2), m.group(3)


# The ordinary (no temporary suffix) segment file suffixes: list_segments' fast path.
_ORDINARY_SUFFIXES = frozenset(SEGMENT_FILE_SUFFIXES)


class SegmentListing(NamedTuple):
    """A partition directory's names sorted out for the loader (list_segments)."""

    bases: list           # base offsets of the ordinary .log files, ascending
    swap_bases: list      # base offsets of the .log.swap files, ascending
    leftovers: list       # names of interrupted work (is_leftover_file_name)
    orphan_indexes: list  # ordinary index file names whose base has no ordinary .log
    other_names: list     # everything else (partition.metadata, topic.json, a user's file)
    txn_index_bases: list     # bases of the segments with a .txnindex, ascending
    snapshot_offsets: list    # offsets of the producer-state snapshots, ascending


def list_directory(directory):
    """list_segments of the directory as it is now."""
    return list_segments(os.listdir(directory))


def list_segments(names):
    """Sort one listing of a partition directory into a SegmentListing, in one pass.

    The ordinary segment files (nearly every name, tens of thousands in a
    large partition) are recognised by their suffix and a decimal prefix; the
    rest go through parse_segment_file_name. Same answers as parsing every
    name: `\\d` and str.isdecimal accept the same digits."""
    logs, index_names, swaps, leftovers, others, snapshots = [], [], [], [], [], []
    txn_prefixes, swap_names = [], []
    cleaned = False
    for name in names:
        suffix = name[20:]
        if suffix in _ORDINARY_SUFFIXES and name[:20].isdecimal():
            if suffix == LOG_SUFFIX:
                logs.append(name[:20])
            else:
                index_names.append(name)
                if suffix == TXN_INDEX_SUFFIX:
                    txn_prefixes.append(name[:20])
            continue
        parsed = parse_segment_file_name(name)
        if is_leftover_file_name(name, parsed):
            leftovers.append(name)
            if parsed is not None and parsed[2] == CLEANED_SUFFIX:
                cleaned = True
        elif parsed is not None and parsed[2] == SWAP_SUFFIX:
            swap_names.append((name, parsed))
            if parsed[1] == LOG_SUFFIX:
                swaps.append(parsed[0])
        elif parsed is not None and parsed[1:] == (SNAPSHOT_SUFFIX, ""):
            snapshots.append(parsed[0])
        elif parsed is None:
            others.append(name)
    if cleaned:
        # A cleaner's swap that never reached its commit point (log_cleaner.py,
        # PartitionLog.replace_segments): its .swap files go with its .cleaned ones. A
        # pass is swapped in whole or not at all, so one `.cleaned` file (of a name this
        # module makes: is_leftover_file_name) undoes every `.swap` beside it.
        swaps = []
    swap_bases = set(swaps)
    # Index .swap files without their .log.swap: a swap's files no log claims.
    leftovers += [name for name, parsed in swap_names if parsed[0] not in swap_bases]
    prefixes = set(logs)
    bases = {int(p) for p in prefixes}
    # The same offset may be spelt in other decimal digits: compare numbers where text differs.
    orphans = [name for name in index_names
               if name[:20] not in prefixes and int(name[:20]) not in bases]
    txn_bases = sorted({int(p) for p in txn_prefixes} & bases)
    return SegmentListing(sorted(bases), sorted(swap_bases), leftovers, orphans, others,
                          txn_bases, sorted(set(snapshots)))

_OFFSET_FILE_SUFFIXES = frozenset(SEGMENT_FILE_SUFFIXES + (SNAPSHOT_SUFFIX,))
_LEFTOVER_TMP_FILES = frozenset(n + TMP_SUFFIX for n in (
    PARTITION_METADATA_FILE, TOPIC_CONFIG_FILE, LEADER_EPOCH_CHECKPOINT))


def partition_dir_name(topic, partition):
    return f"{topic}-{partition}"


def is_leftover_file_name(name, parsed=False):
    """True for a file of interrupted work that recovery removes: a segment file, snapshot,
    partition.metadata, topic.json or leader-epoch-checkpoint left with a `.deleted`, `.cleaned` or `.tmp` suffix.
    Only names this module makes qualify (a segment file's or snapshot's suffix before the
    temporary one): a file the library did not make is never removed.
    parsed: parse_segment_file_name(name) when the caller has it."""
    if name in _LEFTOVER_TMP_FILES:
        return True
    if parsed is False:
        parsed = parse_segment_file_name(name)
    return parsed is not None and parsed[1] in _OFFSET_FILE_SUFFIXES and \
        parsed[2] in (DELETED_SUFFIX, CLEANED_SUFFIX, TMP_SUFFIX)


_PARTITION_FILES = frozenset((PARTITION_METADATA_FILE, TOPIC_CONFIG_FILE,
                              LEADER_EPOCH_CHECKPOINT)) | _LEFTOVER_TMP_FILES
_TEMP_SUFFIXES = frozenset(("", CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX, TMP_SUFFIX))


def is_partition_file_name(name):
    """True for a name the library gives a file in a partition directory: a segment file,
    index or snapshot (with or without a temporary suffix), partition.metadata, topic.json,
    leader-epoch-checkpoint, or one of those three being written. Deleting a partition
    removes these and nothing else."""
    if name in _PARTITION_FILES:
        return True
    parsed = parse_segment_file_name(name)
    return parsed is not None and parsed[1] in _OFFSET_FILE_SUFFIXES and \
        parsed[2] in _TEMP_SUFFIXES


def delete_dir_name(topic, partition, unique_id, kind=DELETE_DIR_SUFFIX):
    """The name a partition directory is renamed to before it is removed; <= 255 bytes.
    kind=STRAY_DIR_SUFFIX: the name of one set aside instead (kept, never removed)."""
    suffix = f"-{partition}.{unique_id}{kind}"
    return topic[:MAX_FILE_NAME_BYTES - len(suffix)] + suffix


def is_delete_dir_name(name):
    """True for a name delete_dir_name() makes (the random id says the library made it)."""
    return _DELETE_DIR_NAME.match(name) is not None


def parse_partition_dir_name(name):
    """(topic, partition) for `<topic>-<partition>`, else None (split at the last '-')."""
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    if topic_name_problem(topic) is not None:
        return None
    return topic, int(part)


def topic_name_problem(name, what="topic name"):
    """None if `name` is a legal topic name, else a sentence saying why not, about `what`
    (Kafka checks a static member's group instance id by the same rule: Topic.validate)."""
    if not isinstance(name, str):
        return f"{what} must be a str, not {type(name).__name__}"
    if not name:
        return f"{what} is empty"
    if name in (".", ".."):
        return f"{what} cannot be {name!r}"
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return f"{what} is {len(name)} characters long; the limit is {MAX_TOPIC_NAME_LENGTH}"
    if not _TOPIC_CHARS.match(name):
        return (f"{what} {name!r} contains characters other than ASCII letters, "
                "digits, '.', '_' and '-'")
    return None
