/*
 * One Spark task of a JVM batch read: records start <= offset < end of one
 * topic-partition, and how to read them. Decoded from the packed form that
 * streamlog_spark.tasks.ReadTask pickles to; the layout (big-endian) is
 * defined there, next to the code that writes it:
 *
 *   magic "streamlog-task\x00\x01" (16) | flags int8 | partition int32 |
 *   start int64 | end int64 | tsLowUs int64 | tsHighUs int64 |
 *   topic (uint16 length, UTF-8) | path (int32 length, UTF-8)
 *
 * flags: 1 tsLowUs applies, 2 tsHighUs applies, 4 include headers,
 * 8 fail on data loss.
 */
package streamlog;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;

import org.apache.spark.sql.connector.read.InputPartition;

final class OffsetRangePartition implements InputPartition {
    private static final long serialVersionUID = 1L;
    static final byte[] MAGIC = "streamlog-task\u0000\u0002".getBytes(StandardCharsets.ISO_8859_1);

    final String path;
    final String topic;
    final int partition;
    final long start;
    final long end;
    final boolean hasLow;
    final boolean hasHigh;
    final long tsLowUs;
    final long tsHighUs;
    final boolean includeHeaders;
    final boolean failOnDataLoss;
    final boolean readCommitted;
    /** read_committed: the aborted transactions the range may hold, as
     *  {producer id, first offset, marker offset} (tasks.py packs them). */
    final long[][] aborted;

    private OffsetRangePartition(ByteBuffer b) {
        int flags = b.get();
        partition = b.getInt();
        start = b.getLong();
        end = b.getLong();
        tsLowUs = b.getLong();
        tsHighUs = b.getLong();
        topic = string(b, b.getShort() & 0xffff);
        path = string(b, b.getInt());
        aborted = new long[b.getInt()][];
        for (int i = 0; i < aborted.length; i++) {
            aborted[i] = new long[] {b.getLong(), b.getLong(), b.getLong()};
        }
        hasLow = (flags & 1) != 0;
        hasHigh = (flags & 2) != 0;
        includeHeaders = (flags & 4) != 0;
        failOnDataLoss = (flags & 8) != 0;
        readCommitted = (flags & 16) != 0;
    }

    /** The task packed inside one pickled input partition. */
    static OffsetRangePartition unpack(byte[] pickle) {
        int at = indexOf(pickle, MAGIC);
        if (at < 0) {
            throw new IllegalStateException("a streamlog input partition did not carry a packed "
                    + "read task: the installed streamlog_spark does not match the JVM reader; "
                    + "rebuild it (streamlog_spark.jvm.jar_path) or set "
                    + LogScanBuilder.ENABLED_CONF + "=false");
        }
        return new OffsetRangePartition(ByteBuffer.wrap(pickle, at + MAGIC.length,
                pickle.length - at - MAGIC.length));
    }

    String name() {
        return topic + "-" + partition;
    }

    private static String string(ByteBuffer b, int length) {
        String s = new String(b.array(), b.arrayOffset() + b.position(), length,
                StandardCharsets.UTF_8);
        b.position(b.position() + length);
        return s;
    }

    private static int indexOf(byte[] haystack, byte[] needle) {
        outer:
        for (int i = 0; i + needle.length <= haystack.length; i++) {
            for (int j = 0; j < needle.length; j++) {
                if (haystack[i + j] != needle[j]) {
                    continue outer;
                }
            }
            return i;
        }
        return -1;
    }
}
