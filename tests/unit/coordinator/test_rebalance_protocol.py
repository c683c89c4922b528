"""Which rebalance protocol a consumer's assignor list gives (Kafka's ConsumerCoordinator rule).

Kafka takes the protocols every configured assignor supports and uses the
highest (cooperative over eager); none in common is a configuration error.
"""
import pytest

from streamlog.assignors import (COOPERATIVE, EAGER, get_assignor, rebalance_protocol,
                                 supported_protocols)
from streamlog.errors import InvalidConfigurationError


class Declares:
    """A user assignor declaring `protocols` (left undeclared when None)."""

    def __init__(self, protocols=None):
        self.name = "user"
        if protocols is not None:
            self.supported_protocols = protocols

    def assign(self, partitions_per_topic, subscriptions):
        return {member: [] for member in subscriptions}


@pytest.mark.parametrize("assignors,expected", [
    (["range", "cooperative-sticky"], EAGER),          # Kafka's default list
    (["cooperative-sticky", "range"], EAGER),          # the order does not matter
    (["cooperative-sticky"], COOPERATIVE),
    (["sticky", "roundrobin"], EAGER),
    ([Declares((COOPERATIVE,)), "cooperative-sticky"], COOPERATIVE),
    ([Declares((EAGER, COOPERATIVE))], COOPERATIVE),   # the highest common one
    ([Declares()], EAGER),                              # undeclared: eager only
])
def test_the_highest_protocol_every_assignor_supports(assignors, expected):
    assert rebalance_protocol([get_assignor(a) for a in assignors]) == expected


@pytest.mark.parametrize("assignors", [
    [Declares((COOPERATIVE,)), "range"],
    [Declares((COOPERATIVE,)), Declares()],
    [],
])
def test_no_protocol_in_common_is_a_configuration_error(assignors):
    with pytest.raises(InvalidConfigurationError):
        rebalance_protocol([get_assignor(a) for a in assignors])


def test_declared_protocols_are_checked_when_the_assignor_is_configured():
    assert supported_protocols(Declares(COOPERATIVE)) == (COOPERATIVE,)       # one name
    assert supported_protocols(Declares(lambda: [EAGER])) == (EAGER,)        # a callable
    for bad in ((), ("incremental",)):
        with pytest.raises(InvalidConfigurationError):
            get_assignor(Declares(bad))
