#pragma once
// The regular files of a tar archive (POSIX ustar, GNU, pax), read from memory: what webdataset
// shards are. Long names come from GNU 'L' records and pax 'path' records; other pax keys, GNU
// long link names, directories, links and devices are skipped by their sizes. Every header's
// checksum is verified; a member that runs past the end of the archive, a bad checksum or a bad
// size field is an error naming the archive and the member.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace titan::data {

struct TarMember {
  std::string name;
  uint64_t offset = 0;  // of the member's data within the archive
  uint64_t size = 0;
};

// `archive` names the bytes in errors. With `damage` given, a damaged archive is not an error:
// the members before the damage are returned and the error's message is stored in *damage (left
// empty when the archive is whole), so a data set can keep what is readable.
std::vector<TarMember> list_tar_members(std::string_view bytes, const std::string& archive,
                                        std::string* damage = nullptr);

}  // namespace titan::data
