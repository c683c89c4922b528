/*
 * sl_murmur2.c -- Kafka's murmur2 (seed 0x9747b28c, m 0x5bd1e995, r 24), with
 * all arithmetic in uint32_t so overflow wraps exactly as Java's int does.
 */
#include "sl_murmur2.h"

int32_t sl_murmur2(const uint8_t *data, size_t len)
{
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)len;
    size_t whole = len & ~(size_t)3;
    for (size_t i = 0; i < whole; i += 4) {
        uint32_t k = (uint32_t)data[i] | (uint32_t)data[i + 1] << 8 |
                     (uint32_t)data[i + 2] << 16 | (uint32_t)data[i + 3] << 24;
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    switch (len & 3) {
    case 3:
        h ^= (uint32_t)data[whole + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)data[whole + 1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)data[whole];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return (int32_t)h;
}

int sl_murmur2_partitions(const uint8_t *keys, const int32_t *lens, int32_t n,
                          int32_t num_partitions, int32_t *out)
{
    if (num_partitions < 1)
        return -1;
    for (int32_t i = 0; i < n; i++) {
        if (lens[i] < 0) {
            out[i] = -1;
            continue;
        }
        uint32_t positive = (uint32_t)sl_murmur2(keys, (size_t)lens[i]) & 0x7fffffffu;
        out[i] = (int32_t)(positive % (uint32_t)num_partitions);
        keys += lens[i];
    }
    return 0;
}
