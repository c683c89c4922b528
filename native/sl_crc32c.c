/*
 * sl_crc32c.c -- CRC-32C with a hardware path and a table fallback.
 *
 * Why slicing-by-8 rather than a byte table: it is ~5x faster and the fallback
 * still runs on every batch append and read on CPUs without SSE4.2.
 * The hardware path runs three independent crc32q chains over three adjacent
 * blocks: the instruction has a latency of 3 cycles but a throughput of 1, so
 * a single chain leaves two thirds of it idle. The three partial CRCs are
 * merged with a precomputed operator that "appends n zero bytes" to a CRC
 * register (multiplication by x^(8n) mod P, as a 4 x 256 lookup table), which
 * is linear over GF(2): crc(A || B) = zeros_|B|(crc(A)) ^ crc_from_0(B).
 */
#include "sl_crc32c.h"

#include <string.h>

#define SL_CRC32C_POLY 0x82F63B78u

static uint32_t sl_crc_table[8][256];
static int sl_crc_hw;

/* Block sizes of the interleaved hardware path, and their zero-append operators. */
#define SL_CRC_LONG 8192
#define SL_CRC_SHORT 256
static uint32_t sl_crc_long_zeros[4][256];
static uint32_t sl_crc_short_zeros[4][256];

/* Multiply the 32x32 GF(2) matrix `mat` (column i = image of bit i) by vec. */
static uint32_t gf2_times(const uint32_t mat[32], uint32_t vec)
{
    uint32_t sum = 0;
    for (int i = 0; vec; i++, vec >>= 1)
        if (vec & 1)
            sum ^= mat[i];
    return sum;
}

static void gf2_square(uint32_t square[32], const uint32_t mat[32])
{
    for (int i = 0; i < 32; i++)
        square[i] = gf2_times(mat, mat[i]);
}

/* Build the table that applies "append len zero bytes" to a raw CRC register. */
static void sl_crc_zeros_table(uint32_t table[4][256], size_t len)
{
    uint32_t op[32], sq[32];
    /* op = one zero bit: the register shifts right, xoring the polynomial when bit 0 is set */
    op[0] = SL_CRC32C_POLY;
    for (int i = 1; i < 32; i++)
        op[i] = 1u << (i - 1);
    gf2_square(sq, op); /* two zero bits */
    gf2_square(op, sq); /* four */
    gf2_square(sq, op); /* eight: one zero byte, in sq */
    /* result = product of the squarings selected by the bits of len */
    uint32_t result[32];
    int have = 0;
    uint32_t *cur = sq, *other = op;
    while (len) {
        if (len & 1) {
            if (!have) {
                memcpy(result, cur, sizeof(result));
                have = 1;
            } else {
                uint32_t tmp[32];
                for (int i = 0; i < 32; i++)
                    tmp[i] = gf2_times(cur, result[i]);
                memcpy(result, tmp, sizeof(result));
            }
        }
        len >>= 1;
        if (len) {
            gf2_square(other, cur);
            uint32_t *t = cur;
            cur = other;
            other = t;
        }
    }
    for (uint32_t n = 0; n < 256; n++) {
        table[0][n] = gf2_times(result, n);
        table[1][n] = gf2_times(result, n << 8);
        table[2][n] = gf2_times(result, n << 16);
        table[3][n] = gf2_times(result, n << 24);
    }
}

static inline uint32_t sl_crc_shift(uint32_t table[4][256], uint32_t crc)
{
    return table[0][crc & 0xff] ^ table[1][(crc >> 8) & 0xff] ^ table[2][(crc >> 16) & 0xff] ^
           table[3][crc >> 24];
}

/* Build the tables and probe the CPU once, when the module is loaded: no
 * locking is needed later because the tables are read-only from then on. */
__attribute__((constructor)) static void sl_crc32c_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ SL_CRC32C_POLY : c >> 1;
        sl_crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = sl_crc_table[0][n];
        for (int t = 1; t < 8; t++) {
            c = sl_crc_table[0][c & 0xff] ^ (c >> 8);
            sl_crc_table[t][n] = c;
        }
    }
    sl_crc_zeros_table(sl_crc_long_zeros, SL_CRC_LONG);
    sl_crc_zeros_table(sl_crc_short_zeros, SL_CRC_SHORT);
    /* The SSE4.2 path below is built for x86-64 only, so only there can it be on. */
#if defined(__x86_64__)
    __builtin_cpu_init();
    sl_crc_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#else
    sl_crc_hw = 0;
#endif
}

uint32_t sl_crc32c_sw(uint32_t crc, const uint8_t *buf, size_t len)
{
    uint32_t c = ~crc;
    while (len && ((uintptr_t)buf & 7)) {
        c = sl_crc_table[0][(c ^ *buf++) & 0xff] ^ (c >> 8);
        len--;
    }
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, buf, 8);
        /* The tables assume little-endian word loads. */
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        w = __builtin_bswap64(w);
#endif
        w ^= c;
        c = sl_crc_table[7][w & 0xff] ^ sl_crc_table[6][(w >> 8) & 0xff] ^
            sl_crc_table[5][(w >> 16) & 0xff] ^ sl_crc_table[4][(w >> 24) & 0xff] ^
            sl_crc_table[3][(w >> 32) & 0xff] ^ sl_crc_table[2][(w >> 40) & 0xff] ^
            sl_crc_table[1][(w >> 48) & 0xff] ^ sl_crc_table[0][w >> 56];
        buf += 8;
        len -= 8;
    }
    while (len--)
        c = sl_crc_table[0][(c ^ *buf++) & 0xff] ^ (c >> 8);
    return ~c;
}

#if defined(__x86_64__)
#include <nmmintrin.h>

/* Three crc32q chains over the three adjacent `block`-byte blocks at buf, merged into
 * the register c with the zero-append operator for `block` bytes. */
__attribute__((target("sse4.2"))) static inline uint64_t
sl_crc32c_three_blocks(uint64_t c, const uint8_t *buf, size_t block, uint32_t zeros[4][256])
{
    uint64_t c1 = 0, c2 = 0;
    for (const uint8_t *end = buf + block; buf < end; buf += 8) {
        uint64_t w0, w1, w2;
        memcpy(&w0, buf, 8);
        memcpy(&w1, buf + block, 8);
        memcpy(&w2, buf + 2 * block, 8);
        c = _mm_crc32_u64(c, w0);
        c1 = _mm_crc32_u64(c1, w1);
        c2 = _mm_crc32_u64(c2, w2);
    }
    c = sl_crc_shift(zeros, (uint32_t)c) ^ (uint32_t)c1;
    return sl_crc_shift(zeros, (uint32_t)c) ^ (uint32_t)c2;
}

__attribute__((target("sse4.2"))) static uint32_t sl_crc32c_hw(uint32_t crc, const uint8_t *buf,
                                                                size_t len)
{
    uint64_t c = ~crc;
    while (len && ((uintptr_t)buf & 7)) {
        c = _mm_crc32_u8((uint32_t)c, *buf++);
        len--;
    }
    for (; len >= 3 * SL_CRC_LONG; buf += 3 * SL_CRC_LONG, len -= 3 * SL_CRC_LONG)
        c = sl_crc32c_three_blocks(c, buf, SL_CRC_LONG, sl_crc_long_zeros);
    for (; len >= 3 * SL_CRC_SHORT; buf += 3 * SL_CRC_SHORT, len -= 3 * SL_CRC_SHORT)
        c = sl_crc32c_three_blocks(c, buf, SL_CRC_SHORT, sl_crc_short_zeros);
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, buf, 8);
        c = _mm_crc32_u64(c, w);
        buf += 8;
        len -= 8;
    }
    while (len--)
        c = _mm_crc32_u8((uint32_t)c, *buf++);
    return ~(uint32_t)c;
}
#endif

uint32_t sl_crc32c(uint32_t crc, const uint8_t *buf, size_t len)
{
#if defined(__x86_64__)
    if (sl_crc_hw)
        return sl_crc32c_hw(crc, buf, len);
#endif
    return sl_crc32c_sw(crc, buf, len);
}

int sl_crc32c_hw_enabled(void)
{
    return sl_crc_hw;
}
