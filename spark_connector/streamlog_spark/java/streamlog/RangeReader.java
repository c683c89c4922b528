/*
 * The executor side of a JVM batch read: one OffsetRangePartition ->
 * ColumnarBatches of the columns the query kept.
 *
 * Owns record decoding (docs/FORMAT.md, "Record") straight into Spark's
 * column vectors: no per-record object, keys and values copied once from the
 * batch bytes. Applies what the Kafka source applies on read: control batches
 * are skipped, read_committed skips the batches of aborted transactions (the
 * task carries them, as Kafka's fetch response does), a LogAppendTime batch gives every record its append time,
 * headers is null (not empty) for a record without headers, a pushed-down
 * timestamp filter is exact. A query that needs no column (count()) takes the
 * record count of each batch that lies wholly inside the range from its
 * header, without decompressing it.
 */
package streamlog;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;

import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

final class RangeReader implements PartitionReader<ColumnarBatch> {
    /** Rows per ColumnarBatch (Spark's own columnar readers default to 4,096). */
    static final int BATCH_ROWS = 8192;
    /** Bytes of keys, values and headers per ColumnarBatch, beyond which it is handed over
     *  early: rows of large records (Kafka allows 1 MiB and more) would otherwise make one
     *  batch of gigabytes. */
    static final int BATCH_BYTES = 32 << 20;
    /** Rows per batch of a read that needs no column: only counts move. */
    private static final int COUNT_ONLY_ROWS = 1 << 24;

    private final OffsetRangePartition range;
    private final SegmentCursor cursor;
    private final ColumnarBatch batch;
    private final ColumnVector[] columns;
    private final boolean countOnly;
    // Output vectors of the kept columns (null when not kept).
    private WritableColumnVector key;
    private WritableColumnVector value;
    private WritableColumnVector offset;
    private WritableColumnVector timestamp;
    private WritableColumnVector timestampType;
    private WritableColumnVector headers;

    // The records of the current Kafka batch: rec[pos, limit), `left` still to decode.
    private byte[] rec;
    private int pos;
    private int limit;
    private int left;
    private long base;
    private long batchTimestamp;   // baseTimestamp, or maxTimestamp under LogAppendTime
    private boolean logAppendTime;
    private long start;
    private boolean done;
    private long batchBytes;   // key, value and header bytes copied into the current batch

    RangeReader(OffsetRangePartition range, StructType required) {
        this.range = range;
        StructField[] fields = required.fields();
        columns = new ColumnVector[fields.length];
        int capacity = BATCH_ROWS;
        for (int i = 0; i < fields.length; i++) {
            String name = fields[i].name();
            switch (name) {
                case "topic": {
                    ConstantColumnVector c = new ConstantColumnVector(capacity, DataTypes.StringType);
                    c.setUtf8String(UTF8String.fromString(range.topic));
                    columns[i] = c;
                    break;
                }
                case "partition": {
                    ConstantColumnVector c = new ConstantColumnVector(capacity, DataTypes.IntegerType);
                    c.setInt(range.partition);
                    columns[i] = c;
                    break;
                }
                default: {
                    OnHeapColumnVector c = new OnHeapColumnVector(capacity, fields[i].dataType());
                    columns[i] = c;
                    switch (name) {
                        case "key": key = c; break;
                        case "value": value = c; break;
                        case "offset": offset = c; break;
                        case "timestamp": timestamp = c; break;
                        case "timestampType": timestampType = c; break;
                        case "headers": headers = c; break;
                        default:
                            throw new IllegalArgumentException("streamlog has no column " + name);
                    }
                }
            }
        }
        countOnly = fields.length == 0;
        batch = new ColumnarBatch(columns);
        try {
            cursor = new SegmentCursor(range);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        start = cursor.firstOffset();
    }

    @Override
    public boolean next() throws IOException {
        int rows = countOnly ? fillCount() : fill();
        batch.setNumRows(rows);
        return rows > 0;
    }

    @Override
    public ColumnarBatch get() {
        return batch;
    }

    /** Decodes up to BATCH_ROWS records into the vectors; the number of rows. */
    private int fill() throws IOException {
        for (ColumnVector c : columns) {
            if (c instanceof WritableColumnVector) {
                ((WritableColumnVector) c).reset();
            }
        }
        int rows = 0;
        batchBytes = 0;
        while (rows < BATCH_ROWS && batchBytes < BATCH_BYTES) {
            if (left == 0 && !nextBatch()) {
                break;
            }
            if (decodeRecord(rows)) {
                rows++;
            }
        }
        return rows;
    }

    /** Counts records (no column is kept): whole batches by their header where possible. */
    private int fillCount() throws IOException {
        int rows = 0;
        while (rows < COUNT_ONLY_ROWS) {
            if (left == 0 && !nextBatch()) {
                break;
            }
            if (left > 0 && decodeRecord(-1)) {
                rows++;
            } else if (left < 0) {   // a whole batch counted from its header
                rows += -left;
                left = 0;
            }
        }
        return rows;
    }

    /** Moves to the next Kafka batch holding records to read; false at the end. A count-only
     *  read takes a batch wholly inside the range by its header: `left` is then minus its
     *  record count. */
    private boolean nextBatch() throws IOException {
        while (!done) {
            if (!cursor.next()) {
                finish();
                return false;
            }
            start = Math.max(start, cursor.firstOffset());
            if (cursor.lastOffset < start) {
                continue;
            }
            if (cursor.baseOffset >= range.end) {
                done = true;
                break;
            }
            if (cursor.lastOffset >= range.end - 1) {
                done = true;   // this batch is the last one the range touches
            }
            if ((cursor.attributes & SegmentCursor.ATTR_CONTROL) != 0) {
                continue;
            }
            if (range.readCommitted
                    && (cursor.attributes & SegmentCursor.ATTR_TRANSACTIONAL) != 0
                    && aborted(cursor.producerId, cursor.baseOffset, cursor.lastOffset)) {
                continue;
            }
            if (countOnly && cursor.baseOffset >= start && cursor.lastOffset < range.end
                    && !range.hasLow && !range.hasHigh) {
                if (cursor.recordsCount > 0) {
                    left = -cursor.recordsCount;
                    return true;
                }
                continue;
            }
            openRecords();
            if (left > 0) {
                return true;
            }
        }
        return false;
    }

    /** A transactional batch of an aborted transaction: its producer's, from the
     *  transaction's first offset to before its ABORT marker. */
    private boolean aborted(long producerId, long base, long last) {
        for (long[] txn : range.aborted) {
            if (txn[0] == producerId && txn[1] <= base && last < txn[2]) {
                return true;
            }
        }
        return false;
    }

    private void openRecords() {
        int codec = cursor.attributes & SegmentCursor.ATTR_COMPRESSION_MASK;
        int bodyStart = cursor.at + SegmentCursor.HEADER_BYTES;
        int bodyLength = cursor.size - SegmentCursor.HEADER_BYTES;
        if (codec == 0) {
            rec = cursor.buf;
            pos = bodyStart;
            limit = bodyStart + bodyLength;
        } else {
            rec = Codecs.decompress(codec, cursor.buf, bodyStart, bodyLength, this);
            pos = 0;
            limit = rec.length;
        }
        left = cursor.recordsCount;
        if (left == 0 && pos != limit) {
            throw corrupt("a batch of no records holds record bytes");
        }
        base = cursor.baseOffset;
        logAppendTime = (cursor.attributes & SegmentCursor.ATTR_LOG_APPEND_TIME) != 0;
        batchTimestamp = logAppendTime ? cursor.maxTimestamp : cursor.baseTimestamp;
    }

    /** Decodes the next record of the batch into row `row` (-1: count only); false when the
     *  record is outside the range or the timestamp filter. A record must fill its length
     *  exactly, and the batch's records its records section, as Kafka's reader demands. */
    private boolean decodeRecord(int row) {
        left--;
        int length = varint();
        int end = pos + length;
        if (length < 0 || end > limit) {
            throw corrupt("a record runs past the end of its batch");
        }
        if (left == 0 && end != limit) {
            throw corrupt("the batch holds more bytes than its " + cursor.recordsCount
                    + " records");
        }
        pos++;   // attributes
        long timestampDelta = varlong();
        long recordOffset = base + varint();
        int keyLength = varint();
        int keyAt = field(keyLength, end);
        int valueLength = varint();
        int valueAt = field(valueLength, end);
        boolean keep = recordOffset >= start && recordOffset < range.end;
        long ms = logAppendTime ? batchTimestamp : batchTimestamp + timestampDelta;
        long micros = ms * 1000;
        keep &= !(range.hasLow && micros < range.tsLowUs)
                && !(range.hasHigh && micros >= range.tsHighUs);
        if (keep && row >= 0) {
            putBytes(key, row, keyAt, keyLength);
            putBytes(value, row, valueAt, valueLength);
            if (offset != null) {
                offset.putLong(row, recordOffset);
            }
            if (timestamp != null) {
                timestamp.putLong(row, micros);
            }
            if (timestampType != null) {
                timestampType.putInt(row, logAppendTime ? 1 : 0);
            }
        }
        readHeaders(keep && headers != null ? row : -1, end);
        if (pos != end) {
            throw corrupt("a record's fields do not fill its length");
        }
        return keep;
    }

    /** Puts rec[at, at + length) (length -1: null) into row `row` of v, if v is kept. */
    private void putBytes(WritableColumnVector v, int row, int at, int length) {
        if (v == null) {
            return;
        }
        if (length < 0) {
            v.putNull(row);
        } else {
            v.putByteArray(row, rec, at, length);
            batchBytes += length;
        }
    }

    /** Skips a length-prefixed field (-1: null) inside the record ending at `end`; its start. */
    private int field(int length, int end) {
        int at = pos;
        if (length < -1 || (length > 0 && (pos += length) > end)) {
            throw corrupt("a record field runs past the end of its record");
        }
        return at;
    }

    /** Reads the headers of a record into row `row` of the headers column (-1: skips them). */
    private void readHeaders(int row, int end) {
        int count = varint();
        if (count < 0) {
            throw corrupt("a record has " + count + " headers");
        }
        WritableColumnVector elements = row >= 0 ? headers.arrayData() : null;
        int first = row >= 0 ? elements.getElementsAppended() : 0;
        int headersAt = pos;
        for (int i = 0; i < count; i++) {
            int keyLength = varint();
            if (keyLength < 0) {
                throw corrupt("a header has a null key");
            }
            int keyAt = field(keyLength, end);
            int valueLength = varint();
            int valueAt = field(valueLength, end);
            if (elements != null) {
                elements.getChild(0).appendByteArray(rec, keyAt, keyLength);
                if (valueLength < 0) {
                    elements.getChild(1).appendNull();
                } else {
                    elements.getChild(1).appendByteArray(rec, valueAt, valueLength);
                }
                elements.appendStruct(false);
            }
        }
        if (row < 0) {
            return;
        }
        if (count == 0) {
            headers.putNull(row);   // null, not empty, as Spark's Kafka source
        } else {
            headers.putArray(row, first, count);
            batchBytes += pos - headersAt;
        }
    }

    /** At the end of the log: a range that reaches past it lost records to truncation. */
    private void finish() {
        done = true;
        if (cursor.logEnd < range.end && range.failOnDataLoss) {
            throw SegmentCursor.dataLoss(range.name() + " ends at offset " + cursor.logEnd
                    + ", before the planned end " + range.end);
        }
    }

    private int varint() {
        int raw = 0;
        int shift = 0;
        while (true) {
            if (pos >= limit) {
                throw corrupt("a varint runs past the end of its batch");
            }
            byte x = rec[pos++];
            raw |= (x & 0x7f) << shift;
            if (x >= 0) {
                break;
            }
            shift += 7;
            if (shift > 28) {
                throw corrupt("a varint is longer than 5 bytes");
            }
        }
        return (raw >>> 1) ^ -(raw & 1);
    }

    private long varlong() {
        long raw = 0;
        int shift = 0;
        while (true) {
            if (pos >= limit) {
                throw corrupt("a varlong runs past the end of its batch");
            }
            byte x = rec[pos++];
            raw |= (long) (x & 0x7f) << shift;
            if (x >= 0) {
                break;
            }
            shift += 7;
            if (shift > 63) {
                throw corrupt("a varlong is longer than 10 bytes");
            }
        }
        return (raw >>> 1) ^ -(raw & 1);
    }

    IllegalStateException corrupt(String why) {
        return cursor.corrupt("batch " + cursor.baseOffset + ".." + cursor.lastOffset + ": " + why);
    }

    @Override
    public void close() throws IOException {
        batch.close();
        cursor.close();
    }
}
