"""files.list_segments: one pass over a partition directory's names gives what parsing each
name gives (the loader's steps 1 and 2 act on it)."""
from hypothesis import given
from hypothesis import strategies as st

from streamlog.storage import files

SUFFIXES = [".log", ".index", ".timeindex", ".txnindex", ".snapshot", ".log.swap",
            ".index.swap", ".log.deleted", ".index.cleaned", ".log.tmp", ".weird", "",
            ".log.cleaned", ".notes.cleaned", ".backup.deleted", ".txt.tmp", ".weird.swap"]
names = st.one_of(
    st.builds(lambda base, suffix: f"{base:020d}{suffix}",
              st.integers(0, 50), st.sampled_from(SUFFIXES)),
    st.sampled_from(["partition.metadata", "topic.json", "partition.metadata.tmp",
                     "topic.json.tmp", "leader-epoch-checkpoint", "abcdefghijklmnopqrst.log",
                     "٠٠٠٠٠٠٠٠٠٠٠٠٠٠٠٠٠٠٠١.log", "1.log", ".log"]),
    st.text(max_size=30))


def by_parsing_each(listing):
    parsed = [(name, files.parse_segment_file_name(name)) for name in listing]
    logs = {p[0] for _, p in parsed if p and p[1] == files.LOG_SUFFIX and p[2] == ""}
    cleaned = any(p and p[2] == files.CLEANED_SUFFIX and files.is_leftover_file_name(name, p)
                  for name, p in parsed)
    # A swap beside a .cleaned file never committed; swap files without a .log.swap
    # belong to no swap: both are leftovers.
    swaps = set() if cleaned else {p[0] for _, p in parsed if p and p[1] == files.LOG_SUFFIX
                                   and p[2] == files.SWAP_SUFFIX}
    stray_swaps = [name for name, p in parsed if p and p[2] == files.SWAP_SUFFIX
                   and p[0] not in swaps]
    return files.SegmentListing(
        sorted(logs),
        sorted(swaps),
        [name for name, p in parsed if files.is_leftover_file_name(name, p)] + stray_swaps,
        [name for name, p in parsed if p and p[2] == "" and p[0] not in logs
         and p[1] in (files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX, files.TXN_INDEX_SUFFIX)],
        [name for name, p in parsed if p is None and not files.is_leftover_file_name(name, p)],
        sorted({p[0] for _, p in parsed if p and p[1:] == (files.TXN_INDEX_SUFFIX, "")} & logs),
        sorted({p[0] for _, p in parsed if p and p[1:] == (files.SNAPSHOT_SUFFIX, "")}))


@given(st.lists(names, max_size=40, unique=True))
def test_one_pass_agrees_with_parsing_every_name(listing):
    assert files.list_segments(listing) == by_parsing_each(listing)


def test_a_typical_directory():
    listing = files.list_segments([
        "00000000000000000000.log", "00000000000000000000.index",
        "00000000000000000000.timeindex", "00000000000000000100.log",
        "00000000000000000100.index", "00000000000000000200.index",     # orphan
        "00000000000000000300.log.swap", "00000000000000000000.log.deleted",
        "partition.metadata", "topic.json", "topic.json.tmp"])
    assert listing.bases == [0, 100]
    assert listing.swap_bases == [300]
    assert listing.leftovers == ["00000000000000000000.log.deleted", "topic.json.tmp"]
    assert listing.orphan_indexes == ["00000000000000000200.index"]
    assert listing.other_names == ["partition.metadata", "topic.json"]


def test_files_the_library_does_not_name_are_neither_leftovers_nor_a_cleaned_swap():
    listing = files.list_segments([
        "00000000000000000000.log.swap", "00000000000000000000.txt.tmp",
        "00000000000000000000.backup.deleted", "00000000000000000000.notes.cleaned"])
    assert listing.swap_bases == [0]
    assert listing.leftovers == []


def test_swap_files_beside_a_cleaned_file_never_committed():
    listing = files.list_segments([
        "00000000000000000000.log", "00000000000000000000.log.swap",
        "00000000000000000000.index.swap", "00000000000000000050.log.cleaned",
        "00000000000000000070.index.swap"])
    assert listing.swap_bases == []
    assert sorted(listing.leftovers) == [
        "00000000000000000000.index.swap", "00000000000000000000.log.swap",
        "00000000000000000050.log.cleaned", "00000000000000000070.index.swap"]
