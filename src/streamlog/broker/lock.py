"""The writer's exclusive lock on a database directory.

flock(LOCK_EX | LOCK_NB) on `<root>/LOCK`, with the holder's pid written
inside so a refused writer can say who holds it. The lock dies with the
process (the kernel drops it on exit, even on kill -9), so a crashed writer
never leaves a stale lock behind. The file itself is never deleted: removing
a lock file that another process has open is how two writers end up holding
"the" lock at once.
"""
import errno
import fcntl
import os

from ..errors import DatabaseLockedError, KafkaStorageError
from ..storage.files import LOCK_FILE


class DirectoryLock:
    def __init__(self, root):
        self.path = os.path.join(root, LOCK_FILE)
        self._fd = None

    def acquire(self):
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_pid(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                who = f"process {holder}" if holder else "another process"
                raise DatabaseLockedError(
                    f"{os.path.dirname(self.path)} is open for writing by {who}; one writer at "
                    "a time: close it there, or open this one with readonly=True",
                    os.path.dirname(self.path), holder) from None
            raise KafkaStorageError(f"cannot lock {self.path}: {exc}") from exc
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self):
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    @property
    def held(self):
        return self._fd is not None


def _read_pid(fd):
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        return int(text) if text.isdigit() else None
    except OSError:
        return None
