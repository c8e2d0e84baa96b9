// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as iSCSI and ext4
// use it; protects frame headers (frame_format.md). Thread-safe.
#ifndef STARLING_SERVER_TRANSPORT_CRC32C_H_
#define STARLING_SERVER_TRANSPORT_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace starling {
namespace transport {

// Extends `crc` (the CRC of earlier bytes, 0 for none) with `n` bytes.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);

// CRC-32C of `n` bytes; Crc32c("123456789", 9) == 0xE3069283.
inline uint32_t Crc32c(const void* data, size_t n) {
  return Crc32cExtend(0, data, n);
}

}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_CRC32C_H_
