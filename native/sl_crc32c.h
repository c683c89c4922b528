/*
 * sl_crc32c.h -- CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the
 * checksum of Kafka's RecordBatch v2.
 *
 * The SSE4.2 crc32 instruction is used when the CPU has it (checked once at
 * load time); otherwise a slicing-by-8 table. Both give identical results.
 */
#ifndef SL_CRC32C_H
#define SL_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/*
 * Continue a CRC-32C over len bytes at buf. Start with crc = 0; pre- and
 * post-inversion are applied inside, so chaining works like zlib's crc32:
 * sl_crc32c(sl_crc32c(0, a, na), b, nb) == crc of a followed by b.
 * Check value: sl_crc32c(0, "123456789", 9) == 0xE3069283.
 */
uint32_t sl_crc32c(uint32_t crc, const uint8_t *buf, size_t len);

/* The same with the table implementation only (for tests and the leak check). */
uint32_t sl_crc32c_sw(uint32_t crc, const uint8_t *buf, size_t len);

/* 1 when sl_crc32c uses the hardware instruction, 0 when it uses the table. */
int sl_crc32c_hw_enabled(void);

#endif
