#include "titan/graph/collectives.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <optional>
#include <sstream>

#include "titan/core/error.h"

namespace titan::graph {

namespace {

// Plain string scanning rather than std::regex: GCC 12 warns inside <regex> under the sanitizers'
// -O1 (-Wmaybe-uninitialized), and the optimized module of a large step runs to megabytes.

const char* const kKinds[] = {"all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute"};

struct Instruction {
  std::string type, opcode, attrs;
};

bool is_word(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-'; }

// Bytes of an HLO type: "f32[4,8]{1,0}" or a tuple of them; tokens and predicates count as bytes.
double bytes_of(const std::string& type) {
  double total = 0;
  for (size_t open = type.find('['); open != std::string::npos; open = type.find('[', open + 1)) {
    size_t begin = open;
    while (begin > 0 && std::isalnum(static_cast<unsigned char>(type[begin - 1]))) --begin;
    size_t digits = open;
    while (digits > begin && std::isdigit(static_cast<unsigned char>(type[digits - 1]))) --digits;
    if (digits == begin) continue;  // no element type before the dims
    const size_t close = type.find(']', open);
    if (close == std::string::npos) break;
    double n = 1;
    std::istringstream in(type.substr(open + 1, close - open - 1));
    for (std::string d; std::getline(in, d, ',');)
      if (!d.empty()) n *= std::stod(d);
    const std::string bits = type.substr(digits, open - digits);
    total += n * (bits.empty() ? 1.0 : std::stod(bits) / 8.0);
  }
  return total;
}

// The text of attribute `name` ("name=...") up to the next ',', '}' or space; empty if absent.
std::string attribute(const std::string& attrs, const std::string& name, size_t from = 0) {
  for (size_t at = attrs.find(name + "=", from); at != std::string::npos; at = attrs.find(name + "=", at + 1)) {
    if (at > 0 && is_word(attrs[at - 1])) continue;  // the tail of a longer name
    size_t b = at + name.size() + 1;
    if (b < attrs.size() && attrs[b] == '%') ++b;
    size_t e = b;
    while (e < attrs.size() && attrs[e] != ',' && attrs[e] != '}' && attrs[e] != ' ') ++e;
    return attrs.substr(b, e - b);
  }
  return {};
}

// The size of a collective's groups from its replica_groups: {{0,1},{2,3}}, [2,2]<=[4] or
// mesh['axis_0'=2,'axis_1'=2] {'axis_1'}; `fallback` where none can be read.
int64_t group_size(const std::string& attrs, int64_t fallback) {
  const size_t at = attrs.find("replica_groups=");
  if (at == std::string::npos) return fallback;
  const std::string rest = attrs.substr(at + 15);
  if (rest.starts_with("{{")) {
    const std::string first = rest.substr(2, rest.find('}') - 2);
    return first.empty() ? fallback : 1 + static_cast<int64_t>(std::count(first.begin(), first.end(), ','));
  }
  if (rest.starts_with("[")) {
    const size_t comma = rest.find(','), close = rest.find(']');
    if (comma == std::string::npos || close == std::string::npos || comma > close) return fallback;
    return std::stoll(rest.substr(comma + 1, close - comma - 1));
  }
  if (rest.starts_with("mesh[")) {
    const size_t close = rest.find(']'), open = rest.find('{', close), end = rest.find('}', open);
    if (close == std::string::npos || open == std::string::npos || end == std::string::npos) return fallback;
    // 'name'=size pairs, then the names the groups span.
    std::map<std::string, int64_t> sizes;
    const std::string axes = rest.substr(5, close - 5), named = rest.substr(open + 1, end - open - 1);
    for (size_t q = axes.find('\''); q != std::string::npos; q = axes.find('\'', axes.find('\'', q + 1) + 1)) {
      const size_t q2 = axes.find('\'', q + 1);
      if (q2 == std::string::npos || q2 + 1 >= axes.size() || axes[q2 + 1] != '=') break;
      sizes[axes.substr(q + 1, q2 - q - 1)] = std::stoll(axes.substr(q2 + 2));
    }
    int64_t n = 1;
    for (size_t q = named.find('\''); q != std::string::npos; q = named.find('\'', named.find('\'', q + 1) + 1)) {
      const size_t q2 = named.find('\'', q + 1);
      if (q2 == std::string::npos) break;
      const auto it = sizes.find(named.substr(q + 1, q2 - q - 1));
      n *= it == sizes.end() ? 1 : it->second;
    }
    return n;
  }
  return fallback;
}

// "%name = TYPE opcode(attrs..." (after any "ROOT "), or nullopt for another line.
std::optional<Instruction> instruction_of(const std::string& line) {
  size_t at = line.find_first_not_of(' ');
  if (at == std::string::npos || at == 0) return std::nullopt;
  if (line.compare(at, 5, "ROOT ") == 0) at += 5;
  const size_t eq = line.find(" = ", at);
  if (eq == std::string::npos) return std::nullopt;
  size_t t = eq + 3, type_end = t;
  if (t < line.size() && line[t] == '(') {
    int depth = 0;
    for (; type_end < line.size(); ++type_end) {
      depth += line[type_end] == '(' ? 1 : line[type_end] == ')' ? -1 : 0;
      if (depth == 0) break;
    }
    ++type_end;
  } else {
    type_end = line.find(' ', t);
  }
  if (type_end == std::string::npos || type_end >= line.size()) return std::nullopt;
  const size_t op = line.find_first_not_of(' ', type_end);
  const size_t paren = line.find('(', op);
  if (op == std::string::npos || paren == std::string::npos) return std::nullopt;
  Instruction ins{.type = line.substr(t, type_end - t), .opcode = line.substr(op, paren - op),
                  .attrs = line.substr(paren + 1)};
  if (ins.opcode.empty() || !std::all_of(ins.opcode.begin(), ins.opcode.end(), is_word)) return std::nullopt;
  return ins;
}

}  // namespace

double CollectiveCount::traffic_bytes() const {
  double total = 0;
  for (const CollectiveTally& k : kinds) total += k.traffic_bytes;
  return total;
}

CollectiveCount count_collectives(const std::string& hlo_text, int64_t devices) {
  // Computations by name, each its instructions; the entry's name.
  std::map<std::string, std::vector<Instruction>> computations;
  std::string entry, current;
  std::istringstream in(hlo_text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != ' ' && line.back() == '{' && line != "{") {
      // "%name (params) -> type {" or "ENTRY %name ... {"
      const bool is_entry = line.starts_with("ENTRY ");
      size_t b = is_entry ? 6 : 0;
      if (b < line.size() && line[b] == '%') ++b;
      size_t e = b;
      while (e < line.size() && line[e] != ' ' && line[e] != '(') ++e;
      current = line.substr(b, e - b);
      computations[current];
      if (is_entry) entry = current;
    } else if (line == "}") {
      current.clear();
    } else if (!current.empty()) {
      if (std::optional<Instruction> ins = instruction_of(line)) computations[current].push_back(std::move(*ins));
    }
  }
  TITAN_CHECK(!entry.empty(), "graph: the optimized HLO has no ENTRY computation (", hlo_text.size(), " characters)");
  std::map<std::string, CollectiveTally> tallies;
  CollectiveCount out;
  std::function<void(const std::string&, double, int)> walk = [&](const std::string& name, double times, int depth) {
    TITAN_CHECK(depth < 64, "graph: the optimized HLO's calls nest deeper than 64 at ", name);
    const auto it = computations.find(name);
    if (it == computations.end()) return;
    for (const Instruction& ins : it->second) {
      std::string kind = ins.opcode;
      if (kind.ends_with("-start")) kind.resize(kind.size() - 6);
      if (std::find(std::begin(kKinds), std::end(kKinds), kind) != std::end(kKinds) && !ins.opcode.ends_with("-done")) {
        const double bytes = bytes_of(ins.type);
        const double n = static_cast<double>(group_size(ins.attrs, devices));
        const double ring = kind == "all-reduce"       ? 2 * (n - 1) / n
                            : kind == "reduce-scatter" ? n - 1
                            : kind == "collective-permute" ? 1.0
                                                           : (n - 1) / n;
        CollectiveTally& t = tallies[kind];
        t.kind = kind;
        t.count += static_cast<int64_t>(times);
        t.result_bytes += times * bytes;
        t.traffic_bytes += times * bytes * ring;
      }
      double inner = times;
      if (ins.opcode == "while") {
        const std::string trips = "\"known_trip_count\":{\"n\":\"";
        const size_t at = ins.attrs.find(trips);
        if (at != std::string::npos)
          inner *= std::stod(ins.attrs.substr(at + trips.size()));
        else
          out.unknown_trips = true;
      }
      for (const char* key : {"calls", "body", "to_apply", "true_computation", "false_computation"})
        if (const std::string callee = attribute(ins.attrs, key); !callee.empty()) walk(callee, inner, depth + 1);
      if (const size_t at = ins.attrs.find("branch_computations={"); at != std::string::npos) {
        std::istringstream list(ins.attrs.substr(at + 21, ins.attrs.find('}', at) - at - 21));
        for (std::string b; std::getline(list, b, ',');) {
          b.erase(0, b.find_first_not_of(" %"));
          walk(b, inner, depth + 1);
        }
      }
    }
  };
  walk(entry, 1.0, 0);
  for (const char* kind : kKinds)
    if (tallies.count(kind)) out.kinds.push_back(tallies[kind]);
  return out;
}

}  // namespace titan::graph
