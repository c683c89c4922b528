/*
 * Makes the executors' readers: always columnar, over the columns the query
 * kept (see LogScanBuilder.pruneColumns).
 */
package streamlog;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

final class RangeReaderFactory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;
    private final StructType required;

    RangeReaderFactory(StructType required) {
        this.required = required;
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
        return true;
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
        return new RangeReader((OffsetRangePartition) partition, required);
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
        throw new UnsupportedOperationException("streamlog ranges are read as columnar batches");
    }
}
