/*
 * Whole, verified record batches of one partition, in offset order, from a
 * start offset: the JVM reader's view of a partition directory
 * (docs/FORMAT.md). Read-only and lock-free, as every reader besides the
 * writer: a writer may append, and retention may delete segments, meanwhile.
 *
 * Owns finding the start (log start offset, segment, offset-index entry), the
 * batch checks (length, magic, CRC-32C, offsets increasing and inside their
 * segment) and the data-loss rule of Spark's Kafka source for offsets that
 * retention removed. The bytes of the current batch are buf[at, at + size);
 * they stay valid until the next call to next().
 */
package streamlog;

import java.io.Closeable;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.stream.Stream;
import java.util.zip.CRC32C;

final class SegmentCursor implements Closeable {
    static final int HEADER_BYTES = 61;
    static final int ATTR_COMPRESSION_MASK = 0x07;
    static final int ATTR_LOG_APPEND_TIME = 0x08;
    static final int ATTR_TRANSACTIONAL = 0x10;
    static final int ATTR_CONTROL = 0x20;
    private static final int MIN_BATCH_LENGTH = HEADER_BYTES - 12;
    private static final int WINDOW_BYTES = 1 << 20;
    private static final String LOG_SUFFIX = ".log";
    private static final String LOG_START_CHECKPOINT = "log-start-offset-checkpoint";
    /** Spark's Kafka source's advice, appended to every data-loss error. */
    static final String FAIL_ON_DATA_LOSS_TRUE = "Some data may have been lost because they are "
            + "not available in the log any more; either the data was aged out by retention or "
            + "the topic may have been deleted before all the data in the topic was processed. "
            + "If you don't want your query to fail on such cases, set the source option "
            + "\"failOnDataLoss\" to \"false\".";

    private final OffsetRangePartition range;
    private final Path root;
    private final Path dir;
    private final CRC32C crc = new CRC32C();
    private long[] bases = new long[0];
    private int segment = -1;
    private FileChannel channel;
    private Path file;
    private long fileSize;
    private long position;
    private byte[] window = new byte[WINDOW_BYTES];
    private long windowStart;
    private int windowLength;
    private long wanted;          // the next offset the reader wants
    private long previousLast = -1;  // last offset of the previous batch (offsets only increase)
    private boolean exhausted;

    /** The current batch: bytes buf[at, at + size) and its header fields. */
    byte[] buf;
    int at;
    int size;
    long baseOffset;
    long lastOffset;
    int attributes;
    long producerId;
    long baseTimestamp;
    long maxTimestamp;
    int recordsCount;
    /** One past the last offset of the last batch seen: the log end, once exhausted. */
    long logEnd;

    SegmentCursor(OffsetRangePartition range) throws IOException {
        this.range = range;
        this.root = Paths.get(range.path);
        this.dir = root.resolve(range.topic + "-" + range.partition);
        this.bases = listSegments();
        if (bases.length == 0) {
            if (range.failOnDataLoss) {
                throw dataLoss(range.name() + " no longer exists");
            }
            exhausted = true;
            return;
        }
        long start = range.start;
        long logStart = Math.max(bases[0], checkpointedLogStart());
        if (start < logStart) {
            if (range.failOnDataLoss) {
                throw dataLoss(cannotFetch(start, logStart));
            }
            start = logStart;
        }
        wanted = start;
        logEnd = start;
        try {
            openSegment(holding(start), start);
        } catch (IOException | RuntimeException e) {
            closeChannel();
            throw e;
        }
    }

    /** The first offset to read: the range's start, or the log start when retention removed
     *  records below it and failOnDataLoss is false. Moves up the same way while reading. */
    long firstOffset() {
        return wanted;
    }

    /** Index of the segment holding `offset` (the first one when it is below all). */
    private int holding(long offset) {
        int i = Arrays.binarySearch(bases, offset);
        return i >= 0 ? i : Math.max(-i - 2, 0);
    }

    /** Moves to the next whole batch; false at the end of the log. */
    boolean next() throws IOException {
        while (!exhausted) {
            if (fileSize - position >= HEADER_BYTES) {
                ensure(position, HEADER_BYTES);
                int h = (int) (position - windowStart);
                int batchLength = readInt(window, h + 8);
                long total = 12L + batchLength;
                if (batchLength >= MIN_BATCH_LENGTH && position + total <= fileSize) {
                    if (window[h + 16] != 2) {
                        throw corrupt("magic " + window[h + 16] + " is not 2");
                    }
                    ensure(position, (int) total);
                    loadBatch((int) (position - windowStart), (int) total);
                    position += total;
                    return true;
                }
                if (batchLength < MIN_BATCH_LENGTH) {
                    throw corrupt("batch length " + batchLength + " is too small");
                }
                // Only the newest segment may end inside a batch (one still being written:
                // nothing after it is readable yet); a sealed one cut short lost records.
                if (segment + 1 < bases.length) {
                    throw corrupt("the segment ends inside a batch of " + total + " bytes");
                }
                exhausted = true;
                break;
            }
            if (segment + 1 < bases.length && position < fileSize) {
                throw corrupt("the segment ends inside a batch header");
            }
            nextSegment();
        }
        return false;
    }

    private void loadBatch(int h, int total) {
        byte[] w = window;
        long base = readLong(w, h);
        int storedCrc = readInt(w, h + 17);
        crc.reset();
        crc.update(w, h + 21, total - 21);
        if ((int) crc.getValue() != storedCrc) {
            throw corrupt(String.format("CRC-32C 0x%08x does not match the stored 0x%08x",
                    (int) crc.getValue(), storedCrc));
        }
        int lastDelta = readInt(w, h + 23);
        long last = base + lastDelta;
        long segmentEnd = segment + 1 < bases.length ? bases[segment + 1] : Long.MAX_VALUE;
        // Offsets in a segment are relative int32s (its index holds them so): a base offset
        // with a flipped high bit fails here even in the newest segment.
        if (base < bases[segment] || last < base || last >= segmentEnd
                || last - bases[segment] > Integer.MAX_VALUE) {
            throw corrupt("offsets " + base + ".." + last + " do not fit the segment based at "
                    + bases[segment]);
        }
        if (base <= previousLast) {
            throw corrupt("batch " + base + ".." + last + " does not follow the previous batch, "
                    + "which ended at offset " + previousLast);
        }
        buf = w;
        at = h;
        size = total;
        baseOffset = base;
        lastOffset = last;
        attributes = readShort(w, h + 21);
        producerId = readLong(w, h + 43);
        baseTimestamp = readLong(w, h + 27);
        maxTimestamp = readLong(w, h + 35);
        recordsCount = readInt(w, h + 57);
        if (recordsCount < 0 || recordsCount > lastDelta + 1L) {
            throw corrupt("batch " + base + ".." + last + " claims " + recordsCount + " records");
        }
        previousLast = last;
        logEnd = Math.max(logEnd, last + 1);
    }

    private void nextSegment() throws IOException {
        closeChannel();
        if (segment + 1 >= bases.length) {
            exhausted = true;
            return;
        }
        openSegment(segment + 1, bases[segment + 1]);
    }

    private void openSegment(int i, long target) throws IOException {
        segment = i;
        file = dir.resolve(String.format("%020d%s", bases[i], LOG_SUFFIX));
        logEnd = Math.max(logEnd, bases[i]);
        try {
            channel = FileChannel.open(file, StandardOpenOption.READ);
        } catch (NoSuchFileException gone) {
            reopenAfterDeletion();
            return;
        }
        fileSize = channel.size();
        windowStart = 0;
        windowLength = 0;
        position = target > bases[i] ? indexedPosition(bases[i], target) : 0;
    }

    /** The segment to open was deleted after the listing: retention moved the log start past
     *  it (the data-loss rule), or the file vanished some other way (an error). */
    private void reopenAfterDeletion() throws IOException {
        long next = Math.max(wanted, previousLast + 1);
        long[] now = listSegments();
        if (now.length == 0) {
            if (range.failOnDataLoss) {
                throw dataLoss(range.name() + " no longer exists");
            }
            exhausted = true;
            return;
        }
        long logStart = Math.max(now[0], checkpointedLogStart());
        if (next >= logStart) {
            throw new IllegalStateException("segment " + file + " vanished, though the log of "
                    + range.name() + " still starts at " + logStart + "; run `streamlog verify "
                    + root + "`");
        }
        if (range.failOnDataLoss) {
            throw dataLoss(cannotFetch(next, logStart));
        }
        bases = now;
        wanted = logStart;
        int i = holding(wanted);
        while (i < bases.length && bases[i] <= previousLast) {
            i++;   // already read up to previousLast
        }
        if (i == bases.length) {
            exhausted = true;
            return;
        }
        openSegment(i, Math.max(wanted, bases[i]));
    }

    /** The byte position to scan from for `target`: that of the offset index's largest entry
     *  at or below it, if the batch there ends exactly at the entry's offset; else 0. */
    private long indexedPosition(long base, long target) throws IOException {
        Path index = dir.resolve(String.format("%020d.index", base));
        long foundOffset = -1;
        long foundPosition = 0;
        // Read, never mapped: the writer may trim or rebuild the file, and a mapped page past
        // the new end of file faults (docs/ARCHITECTURE.md, "Read-only processes").
        try (FileChannel ch = FileChannel.open(index, StandardOpenOption.READ)) {
            ByteBuffer chunk = ByteBuffer.allocate(64 << 10);
            long previousOffset = 0;
            long previousPosition = 0;
            long at = 0;
            scan:
            while (true) {
                chunk.clear();
                int got = ch.read(chunk, at);
                if (got < 8) {
                    break;
                }
                chunk.flip();
                while (chunk.remaining() >= 8) {
                    long offset = chunk.getInt();
                    long pos = chunk.getInt() & 0xffffffffL;
                    // Entries strictly increase; the active segment's file is preallocated with
                    // zeros, so the first entry that does not increase ends the valid ones.
                    if (offset <= previousOffset || pos <= previousPosition || pos >= fileSize
                            || base + offset > target) {
                        break scan;
                    }
                    foundOffset = base + offset;
                    foundPosition = pos;
                    previousOffset = offset;
                    previousPosition = pos;
                }
                at += got - got % 8;
            }
        } catch (NoSuchFileException missing) {
            return 0;
        }
        if (foundOffset >= 0 && fileSize - foundPosition >= HEADER_BYTES) {
            ensure(foundPosition, HEADER_BYTES);
            int h = (int) (foundPosition - windowStart);
            long last = readLong(window, h) + readInt(window, h + 23);
            if (window[h + 16] == 2 && last == foundOffset) {
                return foundPosition;
            }
        }
        return 0;
    }

    /** Makes file bytes [pos, pos + n) available in window[pos - windowStart, ...). */
    private void ensure(long pos, int n) throws IOException {
        if (pos >= windowStart && pos + n <= windowStart + windowLength) {
            return;
        }
        if (window.length < n) {
            window = new byte[Math.max(n, window.length * 2)];
        }
        int want = (int) Math.min(window.length, fileSize - pos);
        ByteBuffer into = ByteBuffer.wrap(window, 0, want);
        long p = pos;
        while (into.hasRemaining()) {
            int got = channel.read(into, p);
            if (got < 0) {
                break;
            }
            p += got;
        }
        windowStart = pos;
        windowLength = into.position();
        if (windowLength < n) {
            throw corrupt("the file ended inside a batch");  // it was shorter than fileSize
        }
    }

    private long[] listSegments() throws IOException {
        if (!Files.isDirectory(dir)) {
            return new long[0];
        }
        List<Long> out = new ArrayList<>();
        try (Stream<Path> files = Files.list(dir)) {
            files.forEach(p -> {
                String name = p.getFileName().toString();
                if (name.length() == 20 + LOG_SUFFIX.length() && name.endsWith(LOG_SUFFIX)
                        && name.chars().limit(20).allMatch(Character::isDigit)) {
                    out.add(Long.parseLong(name.substring(0, 20)));
                }
            });
        } catch (NoSuchFileException gone) {
            return new long[0];
        }
        return out.stream().mapToLong(Long::longValue).sorted().toArray();
    }

    /** This partition's entry of log-start-offset-checkpoint, 0 when it has none. Read as
     *  storage/checkpoint.py reads it: a file that is malformed anywhere counts as absent
     *  (the planner then plans from the first segment, and so must the reader). */
    private long checkpointedLogStart() throws IOException {
        Path checkpoint = root.resolve(LOG_START_CHECKPOINT);
        List<String> lines;
        try {
            lines = Files.readAllLines(checkpoint, StandardCharsets.UTF_8);
        } catch (NoSuchFileException missing) {
            return 0;
        } catch (IOException unreadable) {
            return 0;
        }
        try {
            if (lines.size() < 2 || Long.parseLong(lines.get(0).strip()) != 0
                    || Long.parseLong(lines.get(1).strip()) != lines.size() - 2) {
                return 0;
            }
            long found = 0;
            for (String line : lines.subList(2, lines.size())) {
                String[] parts = line.split(" ", -1);
                if (parts.length != 3) {
                    return 0;
                }
                int partition = Integer.parseInt(parts[1].strip());
                long offset = Long.parseLong(parts[2].strip());
                if (parts[0].equals(range.topic) && partition == range.partition) {
                    found = offset;
                }
            }
            return found;
        } catch (NumberFormatException malformed) {
            return 0;
        }
    }

    String cannotFetch(long wanted, long logStart) {
        return "Cannot fetch offset " + wanted + " of " + range.name() + ": the log starts at "
                + logStart;
    }

    static IllegalStateException dataLoss(String message) {
        return new IllegalStateException(message + ". " + FAIL_ON_DATA_LOSS_TRUE);
    }

    IllegalStateException corrupt(String why) {
        return new IllegalStateException("corrupt record batch in " + file + " at byte "
                + position + ": " + why + "; run `streamlog verify " + root + "`");
    }

    private void closeChannel() throws IOException {
        if (channel != null) {
            channel.close();
            channel = null;
        }
    }

    @Override
    public void close() throws IOException {
        closeChannel();
    }

    static int readInt(byte[] b, int i) {
        return (b[i] << 24) | ((b[i + 1] & 0xff) << 16) | ((b[i + 2] & 0xff) << 8) | (b[i + 3] & 0xff);
    }

    static int readShort(byte[] b, int i) {
        return ((b[i] & 0xff) << 8) | (b[i + 1] & 0xff);
    }

    static long readLong(byte[] b, int i) {
        return ((long) readInt(b, i) << 32) | (readInt(b, i + 4) & 0xffffffffL);
    }
}
