/*
 * Decompression of a batch's records section, for the codecs streamlog
 * writes (docs/FORMAT.md): gzip stream, snappy (xerial framing, or one raw
 * block), LZ4 frame, zstd frame. The codec libraries are the ones Spark itself
 * ships (java.util.zip, snappy-java, lz4-java, zstd-jni).
 */
package streamlog;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.zip.GZIPInputStream;

import com.github.luben.zstd.ZstdInputStreamNoFinalizer;
import net.jpountz.lz4.LZ4FrameInputStream;
import org.xerial.snappy.SnappyInputStream;

final class Codecs {
    private Codecs() {
    }

    static byte[] decompress(int codec, byte[] src, int offset, int length, RangeReader where) {
        InputStream in = new ByteArrayInputStream(src, offset, length);
        try {
            switch (codec) {
                case 1:
                    in = new GZIPInputStream(in, 64 << 10);
                    break;
                case 3:
                    in = new LZ4FrameInputStream(in);
                    break;
                case 4:
                    in = new ZstdInputStreamNoFinalizer(in);
                    break;
                case 2:
                    // Reads the xerial framing, and a stream without its header as one raw block.
                    in = new SnappyInputStream(in);
                    break;
                default:
                    throw where.corrupt("unknown compression codec " + codec);
            }
            try (InputStream body = in) {
                return body.readAllBytes();
            }
        } catch (IOException e) {
            throw where.corrupt("its records do not decompress (" + e + ")");
        }
    }
}
