#pragma once
// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord, iSCSI and ext4 use it;
// crc32c("123456789") == 0xE3069283. TensorBoard event files frame records with it; checkpoints
// checksum their files with it. Built with SSE4.2 (x86-64 -march=native), it runs on the CPU's
// crc32 instruction at several GB/s, so checksumming a checkpoint costs little next to its I/O.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace titan {

// The CRC of the bytes already covered by `crc` followed by `data[0, n)`, so that a file is
// checksummed piece by piece as it is written: crc32c_extend(crc32c(a), b) == crc32c(a + b).
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);

inline uint32_t crc32c(std::string_view data) {
  return crc32c_extend(0, data.data(), data.size());
}

}  // namespace titan
