"""What `streamlog.open()` accepts as a database directory, and the typed errors
for what it refuses.

A database is a directory holding the metadata log (`__cluster_metadata-0/`).
A writable open makes the directory when it does not exist, and adopts an
empty one, or one holding only the root files a first open writes before its
metadata log (LOCK, checkpoints). Everything else is refused before anything
is written, the way sqlite3 refuses a file that is not a database:

  - a regular file (or anything else that is not a directory);
  - a directory with other contents: somebody's folder, or a database whose
    metadata log is gone (its partitions are not touched: they are data, and
    `streamlog repair` brings them back), refused read-only too;
  - a path this process may not read (or, to write, may not write).

Refusals are NotADatabaseError; file-system failures are KafkaStorageError;
both name the path and say what to do.
"""
import errno
import os

from ..errors import KafkaStorageError, NotADatabaseError
from ..storage.files import ROOT_FILES, partition_dir_name
from ..storage.open_files import OUT_OF_FILES_FIX
from .metadata import METADATA_PARTITION

METADATA_DIR = partition_dir_name(*METADATA_PARTITION)
_SHOWN = 3  # foreign entries named in the refusal


def check_root(root, readonly):
    """Refuse root unless it is (or, writable, may become) a database; make it if absent."""
    if os.path.lexists(root) and not os.path.isdir(root):
        raise NotADatabaseError(
            f"{root} is a file, not a streamlog database (a database is a directory)")
    if readonly:
        _check_access(root, os.R_OK | os.X_OK, "read")
        if not os.path.isdir(os.path.join(root, METADATA_DIR)):
            _refuse_foreign(root, _list(root))
            raise NotADatabaseError(
                f"{root} is not a streamlog database (no {METADATA_DIR} directory); open it "
                "once for writing to create it")
        return
    if not os.path.isdir(root):
        try:
            os.makedirs(root)
        except FileExistsError:
            pass  # made meanwhile by another process: checked below like any directory
        except OSError as exc:
            raise storage_error(root, exc, "create the database directory") from exc
    _check_access(root, os.R_OK | os.W_OK | os.X_OK, "write")
    entries = _list(root)
    if METADATA_DIR not in entries:
        _refuse_foreign(root, entries)


def _list(root):
    try:
        return os.listdir(root)
    except OSError as exc:
        raise storage_error(root, exc, "list the database directory") from exc


def _refuse_foreign(root, entries):
    """NotADatabaseError when a root without a metadata log holds anything but root files."""
    foreign = sorted(name for name in entries if name not in ROOT_FILES)
    if foreign:
        shown = ", ".join(foreign[:_SHOWN]) + (", ..." if len(foreign) > _SHOWN else "")
        raise NotADatabaseError(
            f"{root} is not a streamlog database: it holds {len(foreign)} other entr"
            f"{'y' if len(foreign) == 1 else 'ies'} ({shown}) and no {METADATA_DIR} metadata "
            "log. Nothing was changed. Open an empty or new directory; if this was a "
            "database whose metadata log was lost, its partition directories are intact: "
            f"`streamlog repair {root}` (streamlog.repair in Python) rebuilds the metadata "
            "log from them")


def _check_access(root, mode, what):
    if not os.path.exists(root):
        raise NotADatabaseError(f"{root} does not exist; open it once for writing to create it")
    if not os.access(root, mode):
        advice = ("open it read-only to read it, or fix its permissions"
                  if what == "write" else "fix its permissions")
        raise KafkaStorageError(f"no permission to {what} {root}; {advice}")


def storage_error(root, exc, doing="open the database"):
    """A KafkaStorageError for an OSError met while opening root, naming the path."""
    path = exc.filename or root
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.EACCES, errno.EPERM):
        advice = "fix its permissions, or open the database read-only to read it"
    elif exc.errno == errno.EROFS:
        advice = "the file system is read-only: open the database read-only"
    elif exc.errno in (errno.ENOSPC, errno.EDQUOT):
        advice = "the disk is full: free space, or open the database read-only"
    elif exc.errno in (errno.EMFILE, errno.ENFILE):
        advice = f"the process ran out of file descriptors: {OUT_OF_FILES_FIX}"
    else:
        advice = "check the path and the disk"
    return KafkaStorageError(f"cannot {doing} {root}: {reason} ({path}); {advice}")
