"""Regular expressions as Kafka's broker takes them from a client: RE2/J syntax (KIP-848's
subscription patterns, KIP-1152's transactional id pattern), matched against a whole name.

Python's `re` reads RE2's syntax but also takes constructs RE2 refuses because they need
backtracking: lookarounds, backreferences, conditional groups, atomic groups and possessive
quantifiers. A pattern with one of those is refused here as RE2/J refuses it. What RE2/J
takes and `re` does not (`\\z`, `\\p{Greek}`, `[[:alpha:]]`) is refused too: `re` cannot
compile it.
"""
import re
from re import _constants, _parser

# The parse-tree operations of constructs RE2 has no equivalent for.
_NOT_RE2 = {
    _constants.ASSERT: "a lookaround",
    _constants.ASSERT_NOT: "a lookaround",
    _constants.GROUPREF: "a backreference",
    _constants.GROUPREF_EXISTS: "a conditional group",
    _constants.ATOMIC_GROUP: "an atomic group",
    _constants.POSSESSIVE_REPEAT: "a possessive quantifier",
}


class PatternError(ValueError):
    """A pattern RE2/J would not compile."""


def compile_pattern(pattern):
    """pattern compiled; PatternError when RE2/J would refuse it."""
    try:
        compiled = re.compile(pattern)
        _check_re2(_parser.parse(pattern))
    except re.error as exc:
        raise PatternError(f"{pattern!r} is no regular expression: {exc}") from None
    except PatternError as exc:
        raise PatternError(f"{pattern!r} uses {exc}, which RE2/J does not have") from None
    return compiled


def _check_re2(node):
    """Raise PatternError(what) for the first construct of the parse tree RE2 lacks."""
    if isinstance(node, _parser.SubPattern):
        for op, argument in node:
            if op in _NOT_RE2:
                raise PatternError(_NOT_RE2[op])
            _check_re2(argument)
    elif isinstance(node, (tuple, list)):
        for item in node:
            _check_re2(item)
