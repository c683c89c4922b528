/*
 * sl_cleaner.h -- the log cleaner's per-record work, one call per batch: the keys of a
 * records section into the offset map, and the records a section keeps.
 *
 * The rules and the pure-Python twin are storage/log_cleaner.py and
 * storage/offset_map.py; this is their fast path for an uncompressed (or already
 * decompressed) records section. The map is the Python OffsetMap's own table: slot
 * i holds the two halves of a key's 128-bit hash and its offset + 1; lookup probes
 * linearly from low % slots, exactly as the Python map does, so either
 * side may read what the other wrote (the table: slots x {high, low, offset + 1}, 0 = an
 * empty slot). Keys are hashed with XXH3-128, the function
 * the xxhash package exports (sl_cleaner_set_hash); without it the Python paths run.
 */
#ifndef SL_CLEANER_H
#define SL_CLEANER_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t *table; /* slots x 3: high, low, offset + 1 (0: empty) */
    int64_t slots;
    int64_t max_entries;
    int64_t size;          /* keys held; updated by sl_map_put_section */
    int64_t latest_offset; /* the largest offset put; likewise */
} sl_offset_map;

typedef struct {
    int32_t kept;              /* records kept */
    int32_t last_offset_delta; /* of the last kept record (-1: none kept) */
    int64_t max_timestamp;     /* over the kept records (-1: none kept) */
    int32_t tombstones_kept;   /* kept records without a value */
    int32_t keyless;           /* records dropped for having no key */
    int32_t rebased;           /* 1: timestamp deltas re-encoded against horizon_base */
    int64_t out_len;           /* bytes written at out */
} sl_clean_result;

/* Give the native paths XXH3_128bits (address of the xxhash package's export). */
void sl_cleaner_set_hash(uintptr_t xxh3_128bits);
int sl_cleaner_has_hash(void);

/*
 * Put key -> offset for every keyed record of the n records in buf[0:len] whose offset
 * (base_offset + offset delta) is >= start_offset. Stops, setting *full, at the first new
 * key the map has no room for; *put gets the records put. Returns SL_OK or a negative
 * SL_ERR_* of the record decoder (or SL_ERR_BAD_ARGUMENT without a hash function).
 */
int sl_map_put_section(sl_offset_map *m, const uint8_t *buf, size_t len, int32_t n,
                       int64_t base_offset, int64_t start_offset, int64_t *put, int *full);

/* The offset the map holds for a key, or -1. */
int64_t sl_map_get(const sl_offset_map *m, const uint8_t *key, size_t len);

/*
 * Copy the records of buf[0:len] (n records of a batch at base_offset whose baseTimestamp
 * field is base_timestamp) that the cleaner's record rule keeps to out: a record past
 * latest_offset is kept, a keyless one dropped, else kept iff its offset >= the map's for
 * its key and (it has a value or keep_tombstones). keep (n bytes) gets each record's
 * verdict. When a tombstone is kept and set_horizon is 1, every kept record's timestamp
 * delta is re-encoded against horizon_base (the batch gets its delete horizon). out must
 * hold len + 16 * n bytes. Returns SL_OK or a negative SL_ERR_*.
 */
int sl_clean_section(const sl_offset_map *m, const uint8_t *buf, size_t len, int32_t n,
                     int64_t base_offset, int64_t base_timestamp, int64_t latest_offset,
                     int keep_tombstones, int set_horizon, int64_t horizon_base, uint8_t *keep,
                     uint8_t *out, size_t out_cap, sl_clean_result *res);

#endif
