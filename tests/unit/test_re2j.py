"""streamlog.re2j: patterns as Kafka's RE2/J takes them (KIP-1152's transactional id
pattern): what RE2 has compiles and matches whole names; what needs backtracking, which
RE2 does not have, is refused."""
import pytest

from streamlog.re2j import PatternError, compile_pattern


@pytest.mark.parametrize("pattern", ["tx-.*", "(?i)TX-[0-9]+", "a|b{2,3}", "(?P<n>x)y*?"])
def test_an_re2_pattern_compiles(pattern):
    compile_pattern(pattern)


@pytest.mark.parametrize("pattern, why", [
    ("a(?=b)", "lookaround"), ("(?<!a)b", "lookaround"), (r"(a)\1", "backreference"),
    ("(?>a)", "atomic group"), ("a*+", "possessive"), ("(", "no regular expression")])
def test_what_re2_lacks_or_what_does_not_parse_is_refused(pattern, why):
    with pytest.raises(PatternError, match=why):
        compile_pattern(pattern)


def test_a_pattern_is_matched_against_the_whole_name():
    assert compile_pattern("tx-.*").fullmatch("tx-1")
    assert not compile_pattern("tx").fullmatch("tx-1")
