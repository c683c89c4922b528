/*
 * The driver side of a JVM batch read: the offset ranges the Python planner
 * made (one per Spark partition), and the factory of the executors' readers.
 *
 * Planning is not repeated here. Spark's bridge runs the Python reader's
 * partitions() and hands back each task pickled; a ReadTask pickles to a
 * call carrying its fields as one packed byte string (tasks.py,
 * ReadTask.__reduce__), which OffsetRangePartition.unpack finds by its magic
 * prefix. The packed form is the contract between the two sides; nothing
 * else in the pickle is read.
 */
package streamlog;

import java.util.List;

import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceReadInfo;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

import scala.jdk.javaapi.CollectionConverters;

final class RangeBatch implements Batch {
    private final PythonDataSourceV2 python;
    private final StructType fullSchema;
    private final StructType required;
    private final CaseInsensitiveStringMap options;

    RangeBatch(PythonDataSourceV2 python, StructType fullSchema, StructType required,
               CaseInsensitiveStringMap options) {
        this.python = python;
        this.fullSchema = fullSchema;
        this.required = required;
        this.options = options;
    }

    @Override
    public InputPartition[] planInputPartitions() {
        // The same call, with the same arguments, that the Python scan's own batch makes, so a
        // reader prepared by filter pushdown is the one that plans.
        PythonDataSourceReadInfo info = python.getOrCreateReadInfo(
                DefaultSource.PYTHON_SOURCE, options, fullSchema, false);
        List<byte[]> pickles = CollectionConverters.asJava(info.partitions());
        return pickles.stream()
                .map(OffsetRangePartition::unpack)
                .filter(r -> r.end > r.start)
                .toArray(InputPartition[]::new);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new RangeReaderFactory(required);
    }
}
