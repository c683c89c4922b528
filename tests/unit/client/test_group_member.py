"""group_member's pure parts: subscribe() argument parsing."""
import re

import pytest

from streamlog.client.group_member import parse_subscription
from streamlog.errors import IllegalStateError


def test_topics_in_any_iterable_or_a_single_name():
    assert parse_subscription(["a", "b"], None) == (["a", "b"], None)
    assert parse_subscription(("a",), None) == (["a"], None)
    assert parse_subscription("a", None) == (["a"], None)


def test_patterns_as_text_or_compiled_even_in_the_topics_slot():
    topics, pattern = parse_subscription(None, "ev-.*")
    assert topics is None and pattern.fullmatch("ev-1") and not pattern.fullmatch("xev-1")
    compiled = re.compile("x+")
    assert parse_subscription(compiled, None) == (None, compiled)


@pytest.mark.parametrize("topics,pattern,error", [
    (["a"], "a.*", IllegalStateError),
    (None, None, TypeError),
    (["a", ""], None, TypeError),
    ([b"a"], None, TypeError),
    (None, 42, TypeError),
])
def test_bad_arguments_are_refused(topics, pattern, error):
    with pytest.raises(error):
        parse_subscription(topics, pattern)
