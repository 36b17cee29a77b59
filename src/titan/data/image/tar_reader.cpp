#include "titan/data/image/tar_reader.h"

#include <optional>
#include <utility>

#include "titan/core/error.h"

namespace titan::data {

namespace {
constexpr uint64_t kBlock = 512;

// A fixed-width header field, up to its first NUL.
std::string_view field(std::string_view header, size_t offset, size_t width) {
  std::string_view f = header.substr(offset, width);
  return f.substr(0, f.find('\0'));
}

// An octal number padded by spaces or NULs, or GNU's base-256 form (high bit of the first byte
// set) for sizes of 8 GiB and more. nullopt when malformed.
std::optional<uint64_t> parse_number(std::string_view f) {
  if (!f.empty() && (static_cast<unsigned char>(f[0]) & 0x80)) {
    if (static_cast<unsigned char>(f[0]) != 0x80) return std::nullopt;  // negative, or too large
    uint64_t v = 0;
    for (size_t i = 1; i < f.size(); ++i) {
      if (v >> 56) return std::nullopt;
      v = (v << 8) | static_cast<unsigned char>(f[i]);
    }
    return v;
  }
  size_t i = 0;
  while (i < f.size() && f[i] == ' ') ++i;
  uint64_t v = 0;
  bool digits = false;
  for (; i < f.size() && f[i] >= '0' && f[i] <= '7'; ++i, digits = true) {
    if (v >> 60) return std::nullopt;
    v = v * 8 + static_cast<uint64_t>(f[i] - '0');
  }
  for (; i < f.size(); ++i)
    if (f[i] != ' ' && f[i] != '\0') return std::nullopt;
  return digits ? std::optional<uint64_t>(v) : std::nullopt;
}

bool checksum_matches(std::string_view header, uint64_t stored) {
  uint64_t sum = 0;
  for (size_t i = 0; i < kBlock; ++i)
    sum += (i >= 148 && i < 156) ? uint64_t{' '} : static_cast<unsigned char>(header[i]);
  return sum == stored;
}

// The value of key `path` in a pax extended header ("<length> <key>=<value>\n" records), or "".
std::string pax_path(std::string_view records, const std::string& where) {
  std::string path;
  while (!records.empty()) {
    const size_t space = records.find(' ');
    uint64_t n = 0;
    bool ok = space != std::string_view::npos && space > 0;
    for (size_t i = 0; ok && i < space; ++i) {
      ok = records[i] >= '0' && records[i] <= '9' && n < (uint64_t{1} << 40);
      n = n * 10 + static_cast<uint64_t>(records[i] - '0');
    }
    TITAN_CHECK(ok && n > space + 1 && n <= records.size() && records[n - 1] == '\n', where,
                ": a malformed pax extended header record; the archive is damaged");
    const std::string_view record = records.substr(space + 1, n - space - 2);
    if (record.starts_with("path=")) path = std::string(record.substr(5));
    records.remove_prefix(n);
  }
  return path;
}

// Appends the archive's regular files to `members`, in order; throws at the first damage.
void scan(std::string_view bytes, const std::string& archive, std::vector<TarMember>& members) {
  std::string long_name;  // from a GNU 'L' record or a pax header, for the next member
  uint64_t pos = 0;
  while (pos + kBlock <= bytes.size()) {
    const std::string_view header = bytes.substr(pos, kBlock);
    // A zero block ends the archive (the format asks for two; one is read as the end too).
    if (header.find_first_not_of('\0') == std::string_view::npos) break;
    std::string name = std::string(field(header, 0, 100));
    const std::string_view magic = header.substr(257, 5);
    if (magic == "ustar") {
      const std::string_view prefix = field(header, 345, 155);
      if (!prefix.empty()) name.insert(0, std::string(prefix) + "/");
    }
    if (!long_name.empty()) name = std::exchange(long_name, "");
    std::string where = archive;
    where.append(": member '")
        .append(name)
        .append("' (header at byte ")
        .append(std::to_string(pos))
        .append(")");
    const std::optional<uint64_t> sum = parse_number(header.substr(148, 8));
    TITAN_CHECK(sum && checksum_matches(header, *sum), where,
                ": the header's checksum does not match; the archive is damaged or not a tar file");
    const std::optional<uint64_t> size = parse_number(header.substr(124, 12));
    TITAN_CHECK(size, where, ": a malformed size field; the archive is damaged");
    const uint64_t data = pos + kBlock;
    TITAN_CHECK(*size <= bytes.size() - data, where, ": its ", *size,
                " bytes run past the end of the archive (", bytes.size(),
                " bytes): the archive is truncated; re-create or remove it");
    const char type = header[156];
    if (type == '0' || type == '\0' || type == '7') {
      members.push_back({name, data, *size});
    } else if (type == 'L') {
      long_name = std::string(field(bytes.substr(data, *size), 0, *size));
    } else if (type == 'x') {
      long_name = pax_path(bytes.substr(data, *size), where);
    }
    pos = data + (*size + kBlock - 1) / kBlock * kBlock;
  }
}
}  // namespace

std::vector<TarMember> list_tar_members(std::string_view bytes, const std::string& archive,
                                        std::string* damage) {
  std::vector<TarMember> members;
  if (!damage) {
    scan(bytes, archive, members);
    return members;
  }
  damage->clear();
  try {
    scan(bytes, archive, members);
  } catch (const Error& e) {
    *damage = e.message();
  }
  return members;
}

}  // namespace titan::data
