/*
 * sl_cleaner.c -- see sl_cleaner.h. The map probe and the record rule mirror
 * storage/offset_map.py and storage/log_cleaner.py line for line; the parity tests
 * (tests/native/test_cleaner_parity.py) hold them to it.
 */
#include "sl_cleaner.h"

#include <string.h>

#include "sl_records.h"

typedef struct {
    uint64_t low64;
    uint64_t high64;
} xxh128;
typedef xxh128 (*xxh128_fn)(const void *data, size_t len);

static xxh128_fn hash128;

void sl_cleaner_set_hash(uintptr_t xxh3_128bits) { hash128 = (xxh128_fn)xxh3_128bits; }

int sl_cleaner_has_hash(void) { return hash128 != NULL; }

/* The slot holding (high, low), or the empty one where it would go; -1 if neither. */
static int64_t find_slot(const sl_offset_map *m, uint64_t high, uint64_t low)
{
    int64_t slots = m->slots;
    int64_t i = (int64_t)(low % (uint64_t)slots);
    for (int64_t probes = 0; probes < slots; probes++) {
        const uint64_t *slot = m->table + 3 * i;
        if (slot[2] == 0 || (slot[1] == low && slot[0] == high))
            return i;
        if (++i == slots)
            i = 0;
    }
    return -1;
}

int sl_map_put_section(sl_offset_map *m, const uint8_t *buf, size_t len, int32_t n,
                       int64_t base_offset, int64_t start_offset, int64_t *put, int *full)
{
    const uint8_t *p = buf, *end = buf + len;
    sl_record_view r;
    *put = 0;
    *full = 0;
    if (hash128 == NULL || n < 0)
        return SL_ERR_BAD_ARGUMENT;
    for (int32_t k = 0; k < n; k++) {
        int rc = sl_record_next(buf, &p, end, &r);
        if (rc != SL_OK)
            return rc;
        int64_t offset = base_offset + r.offset_delta;
        if (r.key_len < 0 || offset < start_offset)
            continue;
        xxh128 h = hash128(buf + r.key_pos, (size_t)r.key_len);
        int64_t i = find_slot(m, h.high64, h.low64);
        if (i < 0) {
            *full = 1;
            return SL_OK;
        }
        uint64_t *slot = m->table + 3 * i;
        if (slot[2] == 0) {
            if (m->size >= m->max_entries) {
                *full = 1;
                return SL_OK;
            }
            slot[0] = h.high64;
            slot[1] = h.low64;
            m->size++;
        }
        slot[2] = (uint64_t)offset + 1;
        if (offset > m->latest_offset)
            m->latest_offset = offset;
        (*put)++;
    }
    return p == end ? SL_OK : SL_ERR_TRAILING_BYTES;
}

int64_t sl_map_get(const sl_offset_map *m, const uint8_t *key, size_t len)
{
    if (hash128 == NULL)
        return -1;
    xxh128 h = hash128(key, len);
    int64_t i = find_slot(m, h.high64, h.low64);
    return i < 0 ? -1 : (int64_t)m->table[3 * i + 2] - 1;
}

int sl_clean_section(const sl_offset_map *m, const uint8_t *buf, size_t len, int32_t n,
                     int64_t base_offset, int64_t base_timestamp, int64_t latest_offset,
                     int keep_tombstones, int set_horizon, int64_t horizon_base, uint8_t *keep,
                     uint8_t *out, size_t out_cap, sl_clean_result *res)
{
    const uint8_t *p = buf, *end = buf + len;
    sl_record_view r;
    memset(res, 0, sizeof(*res));
    res->last_offset_delta = -1;
    res->max_timestamp = -1;
    if (hash128 == NULL || n < 0 || out_cap < len + 16 * (size_t)n)
        return SL_ERR_BAD_ARGUMENT;
    /* Pass 1: the verdicts (a kept tombstone decides whether timestamps move). */
    for (int32_t k = 0; k < n; k++) {
        int rc = sl_record_next(buf, &p, end, &r);
        if (rc != SL_OK)
            return rc;
        int64_t offset = base_offset + r.offset_delta;
        int kept;
        if (offset > latest_offset) {
            kept = 1;
        } else if (r.key_len < 0) {
            kept = 0;
            res->keyless++;
        } else {
            kept = offset >= sl_map_get(m, buf + r.key_pos, (size_t)r.key_len) &&
                   (r.value_len >= 0 || keep_tombstones);
        }
        keep[k] = (uint8_t)kept;
        if (kept && r.value_len < 0)
            res->tombstones_kept++;
    }
    if (p != end)
        return SL_ERR_TRAILING_BYTES;
    int rebase = set_horizon && res->tombstones_kept > 0;
    res->rebased = rebase;
    /* Pass 2: copy what is kept, re-encoding the timestamp delta if the base moves. */
    uint8_t *o = out;
    p = buf;
    for (int32_t k = 0; k < n; k++) {
        const uint8_t *start = p;
        sl_record_next(buf, &p, end, &r); /* validated by pass 1 */
        if (!keep[k])
            continue;
        int64_t timestamp = base_timestamp + r.timestamp_delta;
        res->kept++;
        res->last_offset_delta = r.offset_delta;
        if (timestamp > res->max_timestamp)
            res->max_timestamp = timestamp;
        if (!rebase) {
            memcpy(o, start, (size_t)(p - start));
            o += p - start;
            continue;
        }
        int32_t body_len;
        int prefix = sl_read_varint(start, p, &body_len);
        const uint8_t *body = start + prefix;
        /* body: attributes, timestamp delta, then the rest as it is */
        const uint8_t *rest = body + 1 + sl_varlong_size(r.timestamp_delta);
        int64_t delta = timestamp - horizon_base;
        size_t new_body = 1 + sl_varlong_size(delta) + (size_t)(p - rest);
        o = sl_put_varint(o, (int32_t)new_body);
        *o++ = body[0];
        o = sl_put_varlong(o, delta);
        memcpy(o, rest, (size_t)(p - rest));
        o += p - rest;
    }
    res->out_len = o - out;
    return SL_OK;
}
