/*
 * Decompression of a batch's records section, for the codecs streamlog
 * writes (docs/FORMAT.md): gzip stream, LZ4 frame, zstd frame. The codec
 * libraries are the ones Spark itself ships (java.util.zip, lz4-java,
 * zstd-jni). snappy is refused, as the library refuses it.
 */
package streamlog;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.zip.GZIPInputStream;

import com.github.luben.zstd.ZstdInputStreamNoFinalizer;
import net.jpountz.lz4.LZ4FrameInputStream;

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
                    throw where.corrupt("snappy-compressed batches are not supported");
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
