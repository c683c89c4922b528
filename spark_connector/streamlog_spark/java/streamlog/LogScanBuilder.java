/*
 * A scan of format("streamlog"): filters go to the Python reader (which plans
 * the offset ranges), and the columns a query needs are kept here, so the
 * executors decode only those (a count() decodes none). Batch scans read
 * through RangeBatch, micro-batches through RangeStream, unless the session
 * switched the JVM reader off.
 */
package streamlog;

import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.execution.datasources.v2.python.PythonScanBuilder;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

final class LogScanBuilder implements SupportsPushDownFilters, SupportsPushDownRequiredColumns {
    /** Session setting: "false" sends batch reads through the Python reader instead. */
    static final String ENABLED_CONF = "spark.streamlog.jvmReader.enabled";

    private final PythonDataSourceV2 python;
    private final PythonScanBuilder inner;
    private final StructType fullSchema;
    private final CaseInsensitiveStringMap options;
    private StructType required;

    LogScanBuilder(PythonDataSourceV2 python, PythonScanBuilder inner, StructType fullSchema,
                   CaseInsensitiveStringMap options) {
        this.python = python;
        this.inner = inner;
        this.fullSchema = fullSchema;
        this.options = options;
        this.required = fullSchema;
    }

    @Override
    public Filter[] pushFilters(Filter[] filters) {
        return inner.pushFilters(filters);
    }

    @Override
    public Filter[] pushedFilters() {
        return inner.pushedFilters();
    }

    @Override
    public void pruneColumns(StructType requiredSchema) {
        // Whole columns only: a query that needs one field of the headers structs still gets
        // both (Spark projects the rest away), which keeps RangeReader to one headers layout.
        StructField[] fields = requiredSchema.fields().clone();
        for (int i = 0; i < fields.length; i++) {
            fields[i] = fullSchema.apply(fields[i].name());
        }
        required = new StructType(fields);
    }

    @Override
    public Scan build() {
        Scan pythonScan = inner.build();
        boolean enabled = !"false".equalsIgnoreCase(
                SQLConf.get().getConfString(ENABLED_CONF, "true").trim());
        return new LogScan(pythonScan, enabled ? new RangeBatch(python, fullSchema, required,
                options) : null, enabled ? required : fullSchema);
    }

    /** The Python scan, with toBatch() answered by RangeBatch when the JVM reader is on. */
    private static final class LogScan implements Scan {
        private final Scan python;
        private final RangeBatch batch;
        private final StructType schema;

        LogScan(Scan python, RangeBatch batch, StructType schema) {
            this.python = python;
            this.batch = batch;
            this.schema = schema;
        }

        @Override
        public StructType readSchema() {
            return schema;
        }

        @Override
        public String description() {
            return batch != null ? "streamlog (JVM reader) " + schema.catalogString()
                    : python.description();
        }

        @Override
        public Batch toBatch() {
            return batch != null ? batch : python.toBatch();
        }

        @Override
        public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
            MicroBatchStream stream = python.toMicroBatchStream(checkpointLocation);
            return batch != null ? RangeStream.wrap(stream, schema) : stream;
        }
    }
}
