"""The connector's own errors: what Spark's Kafka source reports as data loss.

Option errors are options.OptionError (a ValueError, as Spark's
IllegalArgumentException); errors of the log itself are streamlog's typed
errors, passed through unchanged.
"""
import logging

log = logging.getLogger("streamlog.spark")

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


def report_data_loss(message, tp, fail_on_data_loss):
    """Spark's Kafka source's reportDataLoss: DataLossError with failOnDataLoss, else a
    warning, and the query goes on past what was lost."""
    if fail_on_data_loss:
        raise DataLossError(message, tp)
    log.warning("%s. Records may have been lost; the query goes on because the source "
                "option \"failOnDataLoss\" is \"false\".", message)
