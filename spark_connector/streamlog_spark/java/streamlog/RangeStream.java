/*
 * Structured Streaming reads through the JVM reader: the Python data source's
 * micro-batch stream (offsets, admission control, availableNow, partition
 * discovery, commit) with only its reading replaced.
 *
 * Spark chooses behaviour by the interfaces a stream implements
 * (SupportsAdmissionControl, SupportsTriggerAvailableNow, ...), and which of
 * them the Python stream implements depends on the Python reader. So the
 * wrapper is a dynamic proxy implementing exactly the Python stream's
 * interfaces, forwarding every call except the two that decide how tasks are
 * read: planInputPartitions (the Python planner's ReadTasks, unpacked) and
 * createReaderFactory (RangeReaderFactory).
 */
package streamlog;

import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.util.Arrays;
import java.util.LinkedHashSet;
import java.util.Set;

import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.execution.datasources.v2.python.PythonStreamingInputPartition;
import org.apache.spark.sql.types.StructType;

final class RangeStream implements InvocationHandler {
    private final MicroBatchStream python;
    private final RangeReaderFactory readers;

    private RangeStream(MicroBatchStream python, StructType schema) {
        this.python = python;
        this.readers = new RangeReaderFactory(schema);
    }

    static MicroBatchStream wrap(MicroBatchStream python, StructType schema) {
        Set<Class<?>> interfaces = new LinkedHashSet<>();
        for (Class<?> c = python.getClass(); c != null; c = c.getSuperclass()) {
            interfaces.addAll(Arrays.asList(c.getInterfaces()));
        }
        return (MicroBatchStream) Proxy.newProxyInstance(RangeStream.class.getClassLoader(),
                interfaces.toArray(new Class<?>[0]), new RangeStream(python, schema));
    }

    @Override
    public Object invoke(Object proxy, Method method, Object[] args) throws Throwable {
        String name = method.getName();
        int arity = args == null ? 0 : args.length;
        if (name.equals("planInputPartitions") && arity == 2) {
            InputPartition[] planned = python.planInputPartitions(
                    (org.apache.spark.sql.connector.read.streaming.Offset) args[0],
                    (org.apache.spark.sql.connector.read.streaming.Offset) args[1]);
            return Arrays.stream(planned)
                    .map(p -> OffsetRangePartition.unpack(
                            ((PythonStreamingInputPartition) p).pickedPartition()))
                    .filter(r -> r.end > r.start)
                    .toArray(InputPartition[]::new);
        }
        if (name.equals("createReaderFactory") && arity == 0) {
            return readers;
        }
        if (name.equals("toString") && arity == 0) {
            return "streamlog (JVM reader) " + python;
        }
        try {
            return method.invoke(python, args);
        } catch (InvocationTargetException e) {
            throw e.getCause();
        }
    }
}
