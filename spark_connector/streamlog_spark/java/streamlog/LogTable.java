/*
 * The table behind format("streamlog"): the Python data source's table, with
 * batch scans routed through LogScanBuilder. Writes and everything else are the
 * Python table's, unchanged.
 */
package streamlog;

import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.execution.datasources.v2.python.PythonScanBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

final class LogTable implements Table, SupportsRead, SupportsWrite {
    private final PythonDataSourceV2 python;
    private final Table delegate;

    LogTable(PythonDataSourceV2 python, Table delegate) {
        this.python = python;
        this.delegate = delegate;
    }

    @Override
    public String name() {
        return delegate.name();
    }

    @Override
    @SuppressWarnings("deprecation")
    public StructType schema() {
        return delegate.schema();
    }

    @Override
    public Column[] columns() {
        return delegate.columns();
    }

    @Override
    public Transform[] partitioning() {
        return delegate.partitioning();
    }

    @Override
    public Map<String, String> properties() {
        return delegate.properties();
    }

    @Override
    public Set<TableCapability> capabilities() {
        return delegate.capabilities();
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
        PythonScanBuilder inner = (PythonScanBuilder) ((SupportsRead) delegate).newScanBuilder(options);
        return new LogScanBuilder(python, inner, schema(), options);
    }

    @Override
    public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
        return ((SupportsWrite) delegate).newWriteBuilder(info);
    }
}
