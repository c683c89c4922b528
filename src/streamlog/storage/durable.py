"""Making file-system changes durable: fsync of directories and atomic file replacement;
and the plain read of a small file whole that goes with it.

write_atomically: write a temp file, fsync it, rename it over the target,
fsync the directory. A crash leaves either the old file or the new one,
never a mix; a leftover `.tmp` is ignored by readers and overwritten by the
next write.
"""
import os

from ..errors import KafkaStorageError
from .files import TMP_SUFFIX


def fsync_dir(directory):
    """Make creations, renames and deletions inside `directory` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path, data):
    tmp = path + TMP_SUFFIX
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(os.path.dirname(os.path.abspath(path)))
    except OSError as exc:
        raise KafkaStorageError(f"cannot write {path}: {exc}") from exc


def read_whole(path):
    """A small file's bytes, read with raw os calls: half what open().read() costs, and an
    open of 10,000 partitions reads three such files in each. OSError as os raises it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
