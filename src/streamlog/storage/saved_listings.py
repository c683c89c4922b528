"""The listings of a log root's partition directories, saved by a clean close for the next open.

Listing every partition directory is the largest part of an open after a clean
close: 10,000 partitions of 20 segments hold 620,000 names, which the kernel
alone takes 0.2 s to return and the sorting of them (files.list_segments)
another 0.2 s. A clean close lists each directory once its log is sealed and
writes the listings into the clean-shutdown marker (log_directory.py); the next
writable open takes a directory's saved listing instead of listing it, when the
directory's mtime is still the one saved with it. Adding, removing or renaming
a file in a directory changes its mtime, so a directory changed behind the
library's back since the close is listed as it is now.

With a directory's listing goes its last segment's end: the log file's size
and mtime and the log's next offset. Where that file still has them at the
next open (one stat), the open takes the log's end from the save and leaves
the last segment unopened, as the others are, until its first use (which
checks its indexes, as the loader would have); appending to a file changes
its mtime and, here, its size.

When a saved listing is not taken (the directory is listed instead):
  - it had leftovers or a swap (a clean close leaves none: nothing to save);
  - its mtime is a whole second: a filesystem that keeps whole seconds (FAT,
    HFS+) could give a later change the same mtime;
  - the marker is empty (a close that saved nothing) or fails its checksum.
And the close writes the marker only once the clock the filesystem stamps
mtimes from has moved past the newest saved mtime, of a directory or of a
last segment's file (git's "racy clean"
problem, met the same way): a change made after the close then gets a later
mtime, even within the clock's tick (4 ms here). A directory whose mtime the
clock has not passed after _RACY_WAIT_S (a clock running behind the files',
as a network filesystem's may) is not saved.

Format: the xxh64 of the body (8 bytes, little endian), then the body, msgpack:
[2 (version), {directory name: [mtime_ns, bases, orphan_indexes, other_names,
txn_index_bases, snapshot_offsets, end]}], each list as files.SegmentListing
holds it, end = [last segment's log size, its mtime_ns, next offset] or nil
(no segment, or a whole-second mtime). Version 1 (the same without end) is
read as having no end.
"""
import logging
import os
import struct
import time

import msgpack
import xxhash

from . import files

log = logging.getLogger("streamlog.storage")

VERSION = 2
_CHECKSUM = struct.Struct("<Q")
_RACY_WAIT_S = 0.05
# The clock file timestamps come from (Linux stamps with the coarse clock, a tick behind).
_FS_CLOCK = getattr(time, "CLOCK_REALTIME_COARSE", time.CLOCK_REALTIME)


def take(directory, next_offset, saved=None):
    """(mtime_ns, SegmentListing, end) of directory as it is now, its log ending at
    next_offset, or None where the next open should list it itself (see the module doc).
    saved: what the open took for it, whose listing is kept without listing the directory
    where the mtime is still the saved one. OSError as os raises it."""
    mtime_ns = os.stat(directory).st_mtime_ns   # first: a change after it changes the mtime
    if saved is not None and saved[0] == mtime_ns:
        listing = saved[1]
    else:
        listing = files.list_directory(directory)
        if listing.leftovers or listing.swap_bases or mtime_ns % 1_000_000_000 == 0:
            return None
    end = None
    if listing.bases:
        status = os.stat(files.log_file(directory, listing.bases[-1]))
        if status.st_mtime_ns % 1_000_000_000:
            end = (status.st_size, status.st_mtime_ns, next_offset)
    return mtime_ns, listing, end


def _newest_mtime(saved):
    mtime_ns, _, end = saved
    return mtime_ns if end is None else max(mtime_ns, end[1])


def settle(listings):
    """Wait until the filesystem's clock has passed every saved mtime (at most _RACY_WAIT_S);
    returns listings without the directories it has not passed by then."""
    if not listings:
        return listings
    newest = max(_newest_mtime(saved) for saved in listings.values())
    deadline = time.monotonic() + _RACY_WAIT_S
    while time.clock_gettime_ns(_FS_CLOCK) <= newest and time.monotonic() < deadline:
        time.sleep(0.001)
    now = time.clock_gettime_ns(_FS_CLOCK)
    return {name: saved for name, saved in listings.items() if _newest_mtime(saved) < now}


def encode(listings):
    """The marker's bytes for listings ({directory name: (mtime_ns, SegmentListing, end)})."""
    body = msgpack.packb([VERSION, {
        name: [mtime_ns, listing.bases, listing.orphan_indexes, listing.other_names,
               listing.txn_index_bases, listing.snapshot_offsets, end]
        for name, (mtime_ns, listing, end) in listings.items()}])
    return _CHECKSUM.pack(xxhash.xxh64_intdigest(body)) + body


def decode(data, where):
    """{directory name: (mtime_ns, SegmentListing, end)} from the marker's bytes; {} for an
    empty marker, and for one that does not check (said in the log: every directory is
    listed)."""
    if not data:
        return {}
    try:
        if len(data) < _CHECKSUM.size or \
                _CHECKSUM.unpack_from(data)[0] != xxhash.xxh64_intdigest(data[_CHECKSUM.size:]):
            raise ValueError("checksum mismatch")
        version, entries = msgpack.unpackb(data[_CHECKSUM.size:], strict_map_key=False)
        if version not in (1, VERSION):
            raise ValueError(f"version {version}")
        return {name: (entry[0], files.SegmentListing(entry[1], [], [], *entry[2:6]),
                       None if version == 1 or entry[6] is None else tuple(entry[6]))
                for name, entry in entries.items()}
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        log.warning("%s: the saved listings cannot be read (%s); every partition directory "
                    "is listed", where, exc)
        return {}


def listing_if_unchanged(saved, stat_result):
    """(listing, end) of saved when the directory (stat_result) still has the saved mtime,
    else (None, None)."""
    if saved is None or stat_result is None or stat_result.st_mtime_ns != saved[0]:
        return None, None
    return saved[1], saved[2]


def end_if_unchanged(directory, base, end):
    """The saved next offset of the log whose last segment is at base, when that segment's
    file still has the saved size and mtime (end: take()'s); else None."""
    if end is None:
        return None
    try:
        status = os.stat(files.log_file(directory, base))
    except OSError:
        return None
    if (status.st_size, status.st_mtime_ns) != (end[0], end[1]):
        return None
    return end[2]
