/*
 * The JVM entry point of format("streamlog"): Spark finds this class by the
 * name "<format>.DefaultSource" and, finding a JVM class, uses it in place of
 * the Python data source of the same name.
 *
 * It owns nothing but the hand-over. Schema, options, planning, stream offsets
 * and writing stay with the Python data source registered as "streamlog"
 * (streamlog_spark), reached through Spark's own Python data source bridge;
 * only the executors' side of reading is replaced (RangeBatch for batch
 * scans, RangeStream for micro-batches), by RangeReader, which decodes segment
 * files into columnar batches without a Python worker.
 */
package streamlog;

import java.util.Map;

import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

public final class DefaultSource implements TableProvider {
    /** The Python data source this class fronts: streamlog_spark.StreamlogDataSource.name(). */
    static final String PYTHON_SOURCE = "streamlog";

    private final PythonDataSourceV2 python = new PythonDataSourceV2();

    public DefaultSource() {
        python.setShortName(PYTHON_SOURCE);
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return python.inferSchema(options);
    }

    @Override
    public Transform[] inferPartitioning(CaseInsensitiveStringMap options) {
        return python.inferPartitioning(options);
    }

    @Override
    public boolean supportsExternalMetadata() {
        return python.supportsExternalMetadata();
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new LogTable(python, python.getTable(schema, partitioning, properties));
    }
}
