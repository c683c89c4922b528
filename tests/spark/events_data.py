"""The records of the shared "events" topic the Spark read tests check against.

3 partitions, 20 records each; record i goes to partition i % 3 with
timestamp T0 + i seconds, except a few sent with older timestamps (out of
order within their partition, as CreateTime allows) so that timestamp
filters cannot lean on offset order.
"""
T0 = 1_700_000_000_000
EVENTS = 60
OUT_OF_ORDER = {31: T0 - 3_600_000, 44: T0 - 7_200_000}


def event_timestamp(i):
    return OUT_OF_ORDER.get(i, T0 + i * 1000)


def event_key(i):
    return None if i % 5 == 0 else b"k%d" % i


def event_headers(i):
    return None if i % 4 else [("n", b"%d" % i), ("even", b"yes")]
