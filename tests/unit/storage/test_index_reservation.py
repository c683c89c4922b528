"""Index files hold only reserved bytes: a map never touches a page the disk has not given.

A page of a sparse file written or read through a shared map on a full file system is a
SIGBUS, which no try/except can catch. So every byte an index maps is allocated first
(posix_fallocate), and the file grows by doubling as entries come (sparse_index invariant 2).
"""
import os

import pytest

from streamlog.errors import KafkaStorageError
from streamlog.storage.offset_index import OffsetIndex
from streamlog.storage.time_index import TimeIndex

from support.child import run_py


def allocated(path):
    st = os.stat(path)
    return st.st_blocks * 512 >= st.st_size


def test_a_new_index_reserves_one_page_and_doubles_as_it_fills(tmp_path):
    path = str(tmp_path / "00000000000000000000.index")
    index = OffsetIndex(path, 0, 64 << 10)
    assert os.path.getsize(path) == 4096 and allocated(path)
    sizes = []
    for i in range(1, 8192 + 1):
        index.append(i, i * 10)
        if os.path.getsize(path) not in sizes:
            sizes.append(os.path.getsize(path))
        assert allocated(path)
    assert sizes == [4096, 8192, 16384, 32768, 65536]
    assert index.is_full()
    with pytest.raises(KafkaStorageError, match="full"):
        index.append(10_000, 100_000)
    assert index.lookup(4000) == (4000, 40_000)
    index.close()
    assert os.path.getsize(path) == 8192 * 8  # trimmed to its entries


def test_a_sparse_index_file_is_allocated_when_opened_for_writing(tmp_path):
    """An index file preallocated sparse (as before reservation) is filled in at open, so a
    rebuild or an append cannot fault on one of its holes."""
    path = str(tmp_path / "00000000000000000000.timeindex")
    with open(path, "wb") as f:
        f.truncate(1 << 20)
    assert not allocated(path)
    index = TimeIndex(path, 0, 1 << 20)
    assert allocated(path)
    index.close(trim=False)


def test_shrinking_the_maximum_cuts_the_file_and_keeps_the_entries(tmp_path):
    path = str(tmp_path / "00000000000000000000.index")
    index = OffsetIndex(path, 0, 1 << 20)
    for i in range(1, 1001):
        index.append(i, i * 10)
    index.resize(4096)                     # below what it holds: the entries stay
    assert index.entries == 1000 and index.is_full()
    assert index.lookup(999) == (999, 9990)
    index.reset()                          # a rebuild starts from the new maximum
    assert index.entries == 0 and index.max_entries == 4096 // 8
    index.close()


def test_an_index_the_disk_refuses_is_a_storage_error_before_anything_changes(tmp_path):
    """RLIMIT_FSIZE stands in for a full disk: posix_fallocate past it fails with EFBIG."""
    result = run_py("""
        import os, resource, signal, sys
        from streamlog.errors import KafkaStorageError
        from streamlog.storage.offset_index import OffsetIndex
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        index = OffsetIndex(sys.argv[1], 0, 1 << 20)
        resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))
        appended = 0
        try:
            for i in range(1, 100_000):
                index.append(i, i * 10)
                appended += 1
        except KafkaStorageError as exc:
            print(appended, "disk full" in str(exc), index.entries, index.lookup(appended))
    """, str(tmp_path / "00000000000000000000.index"))
    assert result.returncode == 0, result.stderr
    appended, says_full, entries, last = result.stdout.split(" ", 3)
    assert int(appended) == 1024 == int(entries)   # 8 KiB of 8-byte entries, then refused
    assert says_full == "True"
    assert last.strip() == "(1024, 10240)"

