/*
 * sl_murmur2.h -- Kafka's 32-bit murmur2 key hash (Utils.murmur2), used by the
 * default partitioner: partition = (murmur2(key) & 0x7fffffff) % partitions.
 */
#ifndef SL_MURMUR2_H
#define SL_MURMUR2_H

#include <stddef.h>
#include <stdint.h>

/* The signed murmur2 hash of len bytes at data, bit-exact with Kafka's. */
int32_t sl_murmur2(const uint8_t *data, size_t len);

/*
 * Partition n keys laid back to back in `keys` (lens[i] bytes each; lens[i] < 0
 * is a null key, which gets -1) over num_partitions partitions into out[i].
 * Returns 0, or -1 when num_partitions < 1.
 */
int sl_murmur2_partitions(const uint8_t *keys, const int32_t *lens, int32_t n,
                          int32_t num_partitions, int32_t *out);

#endif
