/*
 * sl_cleaner.c -- see sl_cleaner.h. The map probe and the record rule mirror
 * storage/offset_map.py and storage/log_cleaner.py line for line; the parity tests
 * (tests/native/test_cleaner_parity.py) hold them to it.
 */
#include "sl_cleaner.h"

#include <stdint.h>
#include <stdlib.h>
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

/* One keyed record of a section, hashed, with its slot's line already asked for. */
typedef struct {
    uint64_t high, low;
    int64_t offset;
} hashed_key;

/* A map larger than the caches misses on nearly every probe: every key of the section is
 * hashed first, and the first slot of each is prefetched, so the probes that follow
 * overlap their misses instead of waiting on them one at a time. */
static inline void prefetch_slot(const sl_offset_map *m, uint64_t low)
{
    __builtin_prefetch(m->table + 3 * (low % (uint64_t)m->slots), 1, 1);
}

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
    int rc = SL_OK;
    int32_t keyed = 0;
    *put = 0;
    *full = 0;
    if (hash128 == NULL || n < 0 || len > INT32_MAX)
        return SL_ERR_BAD_ARGUMENT;
    hashed_key *keys = malloc(sizeof(hashed_key) * (size_t)(n > 0 ? n : 1));
    if (keys == NULL)
        return SL_ERR_NO_MEMORY;
    for (int32_t k = 0; k < n; k++) {
        rc = sl_record_next(buf, &p, end, &r);
        if (rc != SL_OK)
            goto done;
        int64_t offset = base_offset + r.offset_delta;
        if (r.key_len < 0 || offset < start_offset)
            continue;
        xxh128 h = hash128(buf + r.key_pos, (size_t)r.key_len);
        keys[keyed] = (hashed_key){h.high64, h.low64, offset};
        prefetch_slot(m, h.low64);
        keyed++;
    }
    if (p != end) {
        rc = SL_ERR_TRAILING_BYTES;
        goto done;
    }
    for (int32_t k = 0; k < keyed; k++) {
        int64_t i = find_slot(m, keys[k].high, keys[k].low);
        if (i < 0) {
            *full = 1;
            break;
        }
        uint64_t *slot = m->table + 3 * i;
        if (slot[2] == 0) {
            if (m->size >= m->max_entries) {
                *full = 1;
                break;
            }
            slot[0] = keys[k].high;
            slot[1] = keys[k].low;
            m->size++;
        }
        slot[2] = (uint64_t)keys[k].offset + 1;
        if (keys[k].offset > m->latest_offset)
            m->latest_offset = keys[k].offset;
        (*put)++;
    }
done:
    free(keys);
    return rc;
}

static int64_t get_hashed(const sl_offset_map *m, uint64_t high, uint64_t low)
{
    int64_t i = find_slot(m, high, low);
    return i < 0 ? -1 : (int64_t)m->table[3 * i + 2] - 1;
}

int64_t sl_map_get(const sl_offset_map *m, const uint8_t *key, size_t len)
{
    if (hash128 == NULL)
        return -1;
    xxh128 h = hash128(key, len);
    return get_hashed(m, h.high64, h.low64);
}

/* Where each record of a section lies, from the one decode of pass 1. */
typedef struct {
    int32_t start, end;     /* the record's bytes in the section */
    int32_t offset_delta;
    int32_t tombstone;      /* no value */
    int64_t timestamp_delta;
} record_span;

int sl_clean_section(const sl_offset_map *m, const uint8_t *buf, size_t len, int32_t n,
                     int64_t base_offset, int64_t base_timestamp, int64_t latest_offset,
                     int keep_tombstones, int set_horizon, int64_t horizon_base, uint8_t *keep,
                     uint8_t *out, size_t out_cap, sl_clean_result *res)
{
    const uint8_t *p = buf, *end = buf + len;
    sl_record_view r;
    int rc = SL_OK;
    memset(res, 0, sizeof(*res));
    res->last_offset_delta = -1;
    res->max_timestamp = -1;
    if (hash128 == NULL || n < 0 || len > INT32_MAX || out_cap < len + 16 * (size_t)n)
        return SL_ERR_BAD_ARGUMENT;
    size_t count = (size_t)(n > 0 ? n : 1);
    hashed_key *keys = malloc(sizeof(hashed_key) * count);
    int32_t *asking = malloc(sizeof(int32_t) * count);
    record_span *spans = malloc(sizeof(record_span) * count);
    if (keys == NULL || asking == NULL || spans == NULL) {
        rc = SL_ERR_NO_MEMORY;
        goto done;
    }
    /* Pass 1: decode once, and the verdicts that need no map. The keys the map must be
     * asked about are hashed (and their slots prefetched) first, then asked, so that the
     * misses overlap (see prefetch_slot). A kept tombstone decides whether timestamps move. */
    int32_t asked = 0;
    for (int32_t k = 0; k < n; k++) {
        const uint8_t *record_start = p;
        rc = sl_record_next(buf, &p, end, &r);
        if (rc != SL_OK)
            goto done;
        spans[k] = (record_span){(int32_t)(record_start - buf), (int32_t)(p - buf),
                                 r.offset_delta, r.value_len < 0, r.timestamp_delta};
        int64_t offset = base_offset + r.offset_delta;
        if (offset > latest_offset) {
            keep[k] = 1;
        } else if (r.key_len < 0) {
            keep[k] = 0;
            res->keyless++;
        } else if (r.value_len < 0 && !keep_tombstones) {
            keep[k] = 0;
        } else {
            xxh128 h = hash128(buf + r.key_pos, (size_t)r.key_len);
            keys[asked] = (hashed_key){h.high64, h.low64, offset};
            asking[asked++] = k;
            prefetch_slot(m, h.low64);
            keep[k] = 0;
        }
    }
    if (p != end) {
        rc = SL_ERR_TRAILING_BYTES;
        goto done;
    }
    for (int32_t a = 0; a < asked; a++)
        keep[asking[a]] = (uint8_t)(keys[a].offset >= get_hashed(m, keys[a].high, keys[a].low));
    for (int32_t k = 0; k < n; k++)
        res->tombstones_kept += keep[k] && spans[k].tombstone;
    int rebase = set_horizon && res->tombstones_kept > 0;
    res->rebased = rebase;
    /* Pass 2: copy what is kept, re-encoding the timestamp delta if the base moves. */
    uint8_t *o = out;
    for (int32_t k = 0; k < n; k++) {
        if (!keep[k])
            continue;
        const record_span *sp = &spans[k];
        const uint8_t *start = buf + sp->start, *stop = buf + sp->end;
        /* Wrapping arithmetic: a hostile delta must not be undefined behaviour. */
        int64_t timestamp = (int64_t)((uint64_t)base_timestamp + (uint64_t)sp->timestamp_delta);
        res->kept++;
        res->last_offset_delta = sp->offset_delta;
        if (timestamp > res->max_timestamp)
            res->max_timestamp = timestamp;
        if (!rebase) {
            memcpy(o, start, (size_t)(stop - start));
            o += stop - start;
            continue;
        }
        int32_t body_len;
        const uint8_t *body = start + sl_read_varint(start, stop, &body_len);
        /* body: attributes, timestamp delta, then the rest as it is. The delta's own bytes
         * are walked, not recomputed: a writer may have used more than the fewest. */
        const uint8_t *rest = body + 1;
        while (rest < stop && (*rest & 0x80))
            rest++;
        rest++;
        int64_t delta = (int64_t)((uint64_t)timestamp - (uint64_t)horizon_base);
        size_t new_body = 1 + sl_varlong_size(delta) + (size_t)(stop - rest);
        o = sl_put_varint(o, (int32_t)new_body);
        *o++ = body[0];
        o = sl_put_varlong(o, delta);
        memcpy(o, rest, (size_t)(stop - rest));
        o += stop - rest;
    }
    res->out_len = o - out;
done:
    free(keys);
    free(asking);
    free(spans);
    return rc;
}
