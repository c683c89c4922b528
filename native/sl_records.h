/*
 * sl_records.h -- the records section of a Kafka RecordBatch v2, encoded or
 * decoded for a whole batch in one call.
 *
 * Record layout (all varints zig-zag, 7-bit groups, low group first):
 *   length varint (bytes after this field) | attributes int8 (0) |
 *   timestampDelta varlong | offsetDelta varint | keyLength varint (-1 null) |
 *   key | valueLength varint (-1 null) | value | headerCount varint | headers
 * where each header is keyLength varint + UTF-8 key, valueLength varint
 * (-1 null) + value.
 *
 * Columns cross the boundary as flat arrays so Python pays one FFI crossing
 * per batch, never one per record. Lengths use -1 for null. Nothing here
 * allocates: the caller owns every buffer.
 */
#ifndef SL_RECORDS_H
#define SL_RECORDS_H

#include <stddef.h>
#include <stdint.h>

enum {
    SL_OK = 0,
    SL_ERR_BUFFER_TOO_SMALL = -1, /* encode: out_cap too small (use sl_records_bound) */
    SL_ERR_TRUNCATED = -2,        /* decode: a record runs past the end of the buffer */
    SL_ERR_VARINT = -3,           /* decode: a varint longer than 5 (varlong: 10) bytes */
    SL_ERR_RECORD_LENGTH = -4,    /* decode: fields do not add up to the record's length */
    SL_ERR_NEGATIVE_LENGTH = -5,  /* decode: a length below -1, or a null header key */
    SL_ERR_TRAILING_BYTES = -6,   /* decode: bytes left after the declared record count */
    SL_ERR_BAD_ARGUMENT = -7,     /* a negative count or length in the inputs */
    SL_ERR_NO_MEMORY = -8         /* a working buffer could not be allocated */
};

/* Largest number of bytes sl_records_encode can write for these inputs. */
size_t sl_records_bound(int32_t n, size_t keys_bytes, size_t values_bytes, size_t headers_bytes);

/*
 * Encode n records with offset deltas 0..n-1.
 *   timestamps   n absolute timestamps, or NULL: every record gets base_timestamp
 *   keys         the non-null keys back to back; key_lens[i] is -1 for a null key.
 *                key_lens NULL means every key is null.
 *   values       likewise with value_lens (NULL: every value is null).
 *   headers      per record, its whole pre-encoded headers section
 *                (headerCount varint + headers) back to back, header_lens[i]
 *                bytes each; header_lens NULL: every record has no headers.
 * Returns the number of bytes written at out, or a negative SL_ERR_*.
 */
int64_t sl_records_encode(uint8_t *out, size_t out_cap, int32_t n, int64_t base_timestamp,
                          const int64_t *timestamps, const uint8_t *keys, const int32_t *key_lens,
                          const uint8_t *values, const int32_t *value_lens,
                          const uint8_t *headers, const int32_t *header_lens);

/*
 * Decode exactly n records from the len bytes at buf into n-entry arrays:
 * offset and timestamp deltas, and (position, length) into buf of each key,
 * value and headers section (length -1 and position 0 for null; the headers
 * section includes its headerCount, which is in header_counts).
 * Returns SL_OK or a negative SL_ERR_*; *err_pos gets the byte position at
 * which decoding stopped (len on success).
 */
int sl_records_decode(const uint8_t *buf, size_t len, int32_t n, int32_t *offset_deltas,
                      int64_t *timestamp_deltas, int32_t *key_pos, int32_t *key_lens,
                      int32_t *value_pos, int32_t *value_lens, int32_t *header_pos,
                      int32_t *header_lens, int32_t *header_counts, size_t *err_pos);

/*
 * Copy n (position, length) slices of src back to back into dst and write
 * n + 1 Arrow-style offsets (offsets[0] = 0; a null slice, length -1, adds 0
 * bytes). dst must hold the sum of the non-negative lengths. Returns that sum.
 */
int64_t sl_gather(const uint8_t *src, const int32_t *pos, const int32_t *lens, int32_t n,
                  uint8_t *dst, int32_t *offsets);

/*
 * Serialise n (position, length) slices of src as Python's marshal encoding
 * of a list of bytes objects (length -1 -> None): '[' + int32 n, then per item
 * 's' + int32 length + bytes, or 'N'. marshal.loads then creates every object
 * in C in one call, which is what makes per-record Python objects cheap.
 * Returns bytes written, or SL_ERR_BUFFER_TOO_SMALL; sl_marshal_bound gives
 * the size needed.
 */
size_t sl_marshal_bound(const int32_t *lens, int32_t n);
int64_t sl_marshal_slices(const uint8_t *src, const int32_t *pos, const int32_t *lens, int32_t n,
                          uint8_t *dst, size_t cap);

/* One decoded record: positions are relative to the buffer handed to the decoder;
 * a null key or value has length -1 and position 0. The headers section starts
 * with its headerCount varint. */
typedef struct {
    int64_t timestamp_delta;
    int32_t offset_delta;
    int32_t key_pos, key_len;
    int32_t value_pos, value_len;
    int32_t header_pos, header_len, header_count;
} sl_record_view;

/*
 * Decode the record at *pp into *r with every check of sl_records_decode,
 * never reading at or past end. *pp moves past the record on SL_OK, and to the
 * offending byte otherwise. For decoders that build their own output
 * (native/py_per_record.c).
 */
int sl_record_next(const uint8_t *buf, const uint8_t **pp, const uint8_t *end, sl_record_view *r);

/* Read one zig-zag varint at p (not past end) into *out: returns the bytes
 * used, 0 when truncated, -1 when longer than 5 bytes. */
int sl_read_varint(const uint8_t *p, const uint8_t *end, int32_t *out);

/* The encoding helpers the record writers share (see sl_cleaner.c): the bytes a
 * zig-zag varint / varlong of v takes, and writing one at p (returns p past it). */
size_t sl_varint_size(int32_t v);
size_t sl_varlong_size(int64_t v);
uint8_t *sl_put_varint(uint8_t *p, int32_t v);
uint8_t *sl_put_varlong(uint8_t *p, int64_t v);

#endif
