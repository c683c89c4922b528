"""The connector's own errors: what Spark's Kafka source reports as data loss.

Option errors are options.OptionError (a ValueError, as Spark's
IllegalArgumentException); errors of the log itself are streamlog's typed
errors, passed through unchanged.
"""

FAIL_ON_DATA_LOSS_TRUE = (
    "Some data may have been lost because they are not available in the log any more; either "
    "the data was aged out by retention or the topic may have been deleted before all the data "
    "in the topic was processed. If you don't want your query to fail on such cases, set the "
    "source option \"failOnDataLoss\" to \"false\".")


class DataLossError(RuntimeError):
    """Requested offsets are gone (retention, deletion) and failOnDataLoss is true."""

    def __init__(self, message, tp=None):
        super().__init__(f"{message}. {FAIL_ON_DATA_LOSS_TRUE}")
        self.tp = tp

    @classmethod
    def for_range(cls, tp, wanted, log_start):
        return cls(f"Cannot fetch offset {wanted} of {tp[0]}-{tp[1]}: the log starts at "
                   f"{log_start}", tp)
