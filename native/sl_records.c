/*
 * sl_records.c -- whole-batch varint record encode/decode and slice gathering.
 *
 * Invariants:
 *  1. Encode never writes past out + out_cap; it checks the bound once up front
 *     (sl_records_bound) instead of per field, which keeps the inner loop free
 *     of branches on the capacity.
 *  2. Decode never reads past buf + len: every field length is checked against
 *     the bytes remaining before it is used, so corrupt input yields an error
 *     code and a position, never a crash.
 *  3. Output bytes are identical to the pure-Python reference codec
 *     (streamlog.storage.records_py), which the test suite checks.
 */
#include "sl_records.h"

#include <string.h>

/* A varint is at most 5 bytes, a varlong 10. */
#define SL_MAX_VARINT 5
#define SL_MAX_VARLONG 10
/* attributes + varlong timestamp + varint offset + key len + value len + length prefix */
#define SL_MAX_RECORD_OVERHEAD (1 + SL_MAX_VARLONG + SL_MAX_VARINT * 4)

static inline uint32_t zz32(int32_t v) { return ((uint32_t)v << 1) ^ (uint32_t)(v >> 31); }
static inline uint64_t zz64(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }
static inline int32_t unzz32(uint32_t v) { return (int32_t)((v >> 1) ^ (~(v & 1) + 1)); }
static inline int64_t unzz64(uint64_t v) { return (int64_t)((v >> 1) ^ (~(v & 1) + 1)); }

static inline size_t varint_size(int32_t v)
{
    uint32_t u = zz32(v);
    size_t n = 1;
    while (u >= 0x80) {
        u >>= 7;
        n++;
    }
    return n;
}

static inline size_t varlong_size(int64_t v)
{
    uint64_t u = zz64(v);
    size_t n = 1;
    while (u >= 0x80) {
        u >>= 7;
        n++;
    }
    return n;
}

static inline uint8_t *put_varint(uint8_t *p, int32_t v)
{
    uint32_t u = zz32(v);
    while (u >= 0x80) {
        *p++ = (uint8_t)(u | 0x80);
        u >>= 7;
    }
    *p++ = (uint8_t)u;
    return p;
}

static inline uint8_t *put_varlong(uint8_t *p, int64_t v)
{
    uint64_t u = zz64(v);
    while (u >= 0x80) {
        *p++ = (uint8_t)(u | 0x80);
        u >>= 7;
    }
    *p++ = (uint8_t)u;
    return p;
}

size_t sl_records_bound(int32_t n, size_t keys_bytes, size_t values_bytes, size_t headers_bytes)
{
    if (n < 0)
        return 0;
    /* +1 per record for the single 0 byte of an empty headers section */
    return (size_t)n * (SL_MAX_RECORD_OVERHEAD + 1) + keys_bytes + values_bytes + headers_bytes;
}

int64_t sl_records_encode(uint8_t *out, size_t out_cap, int32_t n, int64_t base_timestamp,
                          const int64_t *timestamps, const uint8_t *keys, const int32_t *key_lens,
                          const uint8_t *values, const int32_t *value_lens,
                          const uint8_t *headers, const int32_t *header_lens)
{
    if (n < 0)
        return SL_ERR_BAD_ARGUMENT;
    size_t keys_bytes = 0, values_bytes = 0, headers_bytes = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t kl = key_lens ? key_lens[i] : -1;
        int32_t vl = value_lens ? value_lens[i] : -1;
        int32_t hl = header_lens ? header_lens[i] : 1;
        if (kl < -1 || vl < -1 || hl < 1)
            return SL_ERR_BAD_ARGUMENT;
        keys_bytes += kl > 0 ? (size_t)kl : 0;
        values_bytes += vl > 0 ? (size_t)vl : 0;
        headers_bytes += header_lens ? (size_t)hl : 0;
    }
    if (sl_records_bound(n, keys_bytes, values_bytes, headers_bytes) > out_cap)
        return SL_ERR_BUFFER_TOO_SMALL;

    uint8_t *p = out;
    const uint8_t *k = keys, *v = values, *h = headers;
    for (int32_t i = 0; i < n; i++) {
        int32_t kl = key_lens ? key_lens[i] : -1;
        int32_t vl = value_lens ? value_lens[i] : -1;
        int32_t hl = header_lens ? header_lens[i] : 1;
        int64_t tsd = timestamps ? timestamps[i] - base_timestamp : 0;
        size_t body = 1 + varlong_size(tsd) + varint_size(i) + varint_size(kl) +
                      (kl > 0 ? (size_t)kl : 0) + varint_size(vl) + (vl > 0 ? (size_t)vl : 0) +
                      (size_t)hl;
        p = put_varint(p, (int32_t)body);
        *p++ = 0; /* record attributes: unused */
        p = put_varlong(p, tsd);
        p = put_varint(p, i);
        p = put_varint(p, kl);
        if (kl > 0) {
            memcpy(p, k, (size_t)kl);
            p += kl;
            k += kl;
        }
        p = put_varint(p, vl);
        if (vl > 0) {
            memcpy(p, v, (size_t)vl);
            p += vl;
            v += vl;
        }
        if (header_lens) {
            memcpy(p, h, (size_t)hl);
            p += hl;
            h += hl;
        } else {
            *p++ = 0; /* headerCount 0 */
        }
    }
    return (int64_t)(p - out);
}

/* Read a varint of at most max_bytes groups; returns bytes used, 0 when
 * truncated, -1 when too long. */
static inline int get_varint_u64(const uint8_t *p, const uint8_t *end, int max_bytes, uint64_t *out)
{
    uint64_t u = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (p + i >= end)
            return 0;
        uint8_t b = p[i];
        u |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *out = u;
            return i + 1;
        }
    }
    return -1;
}

/* Field readers for decode_record: on failure set rc and jump to its single exit. */
#define READ_VARINT(dst)                                                                          \
    do {                                                                                          \
        uint64_t u_;                                                                              \
        int r_ = get_varint_u64(p, end, SL_MAX_VARINT, &u_);                                      \
        if (r_ <= 0) {                                                                            \
            rc = r_ == 0 ? SL_ERR_TRUNCATED : SL_ERR_VARINT;                                      \
            goto done;                                                                            \
        }                                                                                         \
        p += r_;                                                                                  \
        (dst) = unzz32((uint32_t)u_);                                                             \
    } while (0)

#define READ_VARLONG(dst)                                                                         \
    do {                                                                                          \
        uint64_t u_;                                                                              \
        int r_ = get_varint_u64(p, end, SL_MAX_VARLONG, &u_);                                     \
        if (r_ <= 0) {                                                                            \
            rc = r_ == 0 ? SL_ERR_TRUNCATED : SL_ERR_VARINT;                                      \
            goto done;                                                                            \
        }                                                                                         \
        p += r_;                                                                                  \
        (dst) = unzz64(u_);                                                                       \
    } while (0)

#define CHECK(cond, code)                                                                         \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            rc = (code);                                                                          \
            goto done;                                                                            \
        }                                                                                         \
    } while (0)

/*
 * Decode the record at *pp (invariant 2: never reads at or past buf_end).
 * Always leaves *pp where decoding stopped: past the record on SL_OK, at the
 * offending byte otherwise (the same position the Python reference reports).
 */
static int decode_record(const uint8_t *buf, const uint8_t **pp, const uint8_t *buf_end,
                         sl_record_view *r)
{
    const uint8_t *p = *pp;
    const uint8_t *end = buf_end;
    const uint8_t *rec_start;
    int rc = SL_OK;
    int32_t rec_len, hc;

    READ_VARINT(rec_len);
    CHECK(rec_len >= 0, SL_ERR_NEGATIVE_LENGTH);
    CHECK((size_t)(buf_end - p) >= (size_t)rec_len, SL_ERR_TRUNCATED);
    end = p + rec_len; /* from here on no field may run past this record */
    rec_start = p;
    CHECK(p < end, SL_ERR_RECORD_LENGTH);
    p++; /* attributes */
    READ_VARLONG(r->timestamp_delta);
    READ_VARINT(r->offset_delta);
    READ_VARINT(r->key_len);
    CHECK(r->key_len >= -1, SL_ERR_NEGATIVE_LENGTH);
    CHECK(r->key_len <= 0 || end - p >= r->key_len, SL_ERR_RECORD_LENGTH);
    r->key_pos = r->key_len >= 0 ? (int32_t)(p - buf) : 0;
    if (r->key_len > 0)
        p += r->key_len;
    READ_VARINT(r->value_len);
    CHECK(r->value_len >= -1, SL_ERR_NEGATIVE_LENGTH);
    CHECK(r->value_len <= 0 || end - p >= r->value_len, SL_ERR_RECORD_LENGTH);
    r->value_pos = r->value_len >= 0 ? (int32_t)(p - buf) : 0;
    if (r->value_len > 0)
        p += r->value_len;
    r->header_pos = (int32_t)(p - buf);
    READ_VARINT(hc);
    CHECK(hc >= 0, SL_ERR_NEGATIVE_LENGTH);
    for (int32_t j = 0; j < hc; j++) {
        int32_t hkl, hvl;
        READ_VARINT(hkl);
        CHECK(hkl >= 0, SL_ERR_NEGATIVE_LENGTH); /* header keys are never null */
        CHECK(end - p >= hkl, SL_ERR_RECORD_LENGTH);
        p += hkl;
        READ_VARINT(hvl);
        CHECK(hvl >= -1, SL_ERR_NEGATIVE_LENGTH);
        CHECK(hvl <= 0 || end - p >= hvl, SL_ERR_RECORD_LENGTH);
        if (hvl > 0)
            p += hvl;
    }
    r->header_len = (int32_t)(p - buf) - r->header_pos;
    r->header_count = hc;
    CHECK(p == rec_start + rec_len, SL_ERR_RECORD_LENGTH);
done:
    *pp = p;
    return rc;
}

int sl_record_next(const uint8_t *buf, const uint8_t **pp, const uint8_t *end, sl_record_view *r)
{
    return decode_record(buf, pp, end, r);
}

int sl_read_varint(const uint8_t *p, const uint8_t *end, int32_t *out)
{
    uint64_t u;
    int used = get_varint_u64(p, end, SL_MAX_VARINT, &u);
    if (used > 0)
        *out = unzz32((uint32_t)u);
    return used;
}

#undef READ_VARINT
#undef READ_VARLONG
#undef CHECK

int sl_records_decode(const uint8_t *buf, size_t len, int32_t n, int32_t *offset_deltas,
                      int64_t *timestamp_deltas, int32_t *key_pos, int32_t *key_lens,
                      int32_t *value_pos, int32_t *value_lens, int32_t *header_pos,
                      int32_t *header_lens, int32_t *header_counts, size_t *err_pos)
{
    const uint8_t *p = buf;
    const uint8_t *const buf_end = buf + len;
    if (n < 0 || len > INT32_MAX) {
        *err_pos = 0;
        return SL_ERR_BAD_ARGUMENT;
    }
    for (int32_t i = 0; i < n; i++) {
        sl_record_view r;
        int rc = decode_record(buf, &p, buf_end, &r);
        if (rc != SL_OK) {
            *err_pos = (size_t)(p - buf);
            return rc;
        }
        offset_deltas[i] = r.offset_delta;
        timestamp_deltas[i] = r.timestamp_delta;
        key_pos[i] = r.key_pos;
        key_lens[i] = r.key_len;
        value_pos[i] = r.value_pos;
        value_lens[i] = r.value_len;
        header_pos[i] = r.header_pos;
        header_lens[i] = r.header_len;
        header_counts[i] = r.header_count;
    }
    *err_pos = (size_t)(p - buf);
    return p == buf_end ? SL_OK : SL_ERR_TRAILING_BYTES;
}

int64_t sl_gather(const uint8_t *src, const int32_t *pos, const int32_t *lens, int32_t n,
                  uint8_t *dst, int32_t *offsets)
{
    int64_t total = 0;
    offsets[0] = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t l = lens[i];
        if (l > 0) {
            memcpy(dst + total, src + pos[i], (size_t)l);
            total += l;
        }
        offsets[i + 1] = (int32_t)total;
    }
    return total;
}

/* marshal writes its int32 fields little-endian whatever the host order. */
static inline uint8_t *put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
    return p + 4;
}

size_t sl_marshal_bound(const int32_t *lens, int32_t n)
{
    size_t size = 5;
    for (int32_t i = 0; i < n; i++)
        size += lens[i] >= 0 ? 5 + (size_t)lens[i] : 1;
    return size;
}

int64_t sl_marshal_slices(const uint8_t *src, const int32_t *pos, const int32_t *lens, int32_t n,
                          uint8_t *dst, size_t cap)
{
    if (n < 0)
        return SL_ERR_BAD_ARGUMENT;
    if (sl_marshal_bound(lens, n) > cap)
        return SL_ERR_BUFFER_TOO_SMALL;
    uint8_t *p = dst;
    *p++ = '[';
    p = put_le32(p, (uint32_t)n);
    for (int32_t i = 0; i < n; i++) {
        int32_t l = lens[i];
        if (l < 0) {
            *p++ = 'N';
            continue;
        }
        *p++ = 's';
        p = put_le32(p, (uint32_t)l);
        memcpy(p, src + pos[i], (size_t)l);
        p += l;
    }
    return (int64_t)(p - dst);
}

size_t sl_varint_size(int32_t v) { return varint_size(v); }
size_t sl_varlong_size(int64_t v) { return varlong_size(v); }
uint8_t *sl_put_varint(uint8_t *p, int32_t v) { return put_varint(p, v); }
uint8_t *sl_put_varlong(uint8_t *p, int64_t v) { return put_varlong(p, v); }
