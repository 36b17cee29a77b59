#include "titan/graph/collectives.h"

#include <functional>
#include <map>
#include <regex>
#include <sstream>

#include "titan/core/error.h"

namespace titan::graph {

namespace {

const char* const kKinds[] = {"all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute"};

struct Instruction {
  std::string type, opcode, attrs;
};

// Bytes of an HLO type: "f32[4,8]{1,0}" or a tuple of them; tokens and predicates count as bytes.
double bytes_of(const std::string& type) {
  static const std::regex array(R"(([a-z]+)([0-9]*)\[([0-9,]*)\])");
  double total = 0;
  for (std::sregex_iterator it(type.begin(), type.end(), array), end; it != end; ++it) {
    const std::string kind = (*it)[1], bits = (*it)[2], dims = (*it)[3];
    double n = 1;
    std::istringstream in(dims);
    for (std::string d; std::getline(in, d, ',');)
      if (!d.empty()) n *= std::stod(d);
    total += n * (bits.empty() ? 1.0 : std::stod(bits) / 8.0);
  }
  return total;
}

// The size of a collective's groups from its replica_groups: {{0,1},{2,3}}, [2,2]<=[4] or
// mesh['axis_0'=2,'axis_1'=2] {'axis_1'}; `fallback` where none can be read.
int64_t group_size(const std::string& attrs, int64_t fallback) {
  const size_t at = attrs.find("replica_groups=");
  if (at == std::string::npos) return fallback;
  const std::string rest = attrs.substr(at + 15);
  std::smatch m;
  if (std::regex_search(rest, m, std::regex(R"(^\{\{([0-9,]*)\})"))) {
    const std::string first = m[1];
    return first.empty() ? fallback : 1 + static_cast<int64_t>(std::count(first.begin(), first.end(), ','));
  }
  if (std::regex_search(rest, m, std::regex(R"(^\[([0-9]+),([0-9]+)\]<=)"))) return std::stoll(m[2]);
  if (std::regex_search(rest, m, std::regex(R"(^mesh\[([^\]]*)\]\s*\{([^}]*)\})"))) {
    std::map<std::string, int64_t> sizes;
    const std::string axes = m[1], named = m[2];
    static const std::regex axis(R"('([^']+)'=([0-9]+))");
    for (std::sregex_iterator it(axes.begin(), axes.end(), axis), end; it != end; ++it)
      sizes[(*it)[1]] = std::stoll((*it)[2]);
    int64_t n = 1;
    static const std::regex name(R"('([^']+)')");
    for (std::sregex_iterator it(named.begin(), named.end(), name), end; it != end; ++it)
      n *= sizes.count((*it)[1]) ? sizes[(*it)[1]] : 1;
    return n;
  }
  return fallback;
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
  static const std::regex header(R"(^(ENTRY\s+)?%?([^\s(]+)\s.*\{\s*$)");
  static const std::regex instruction(R"(^\s+(?:ROOT\s+)?%?\S+\s+=\s+(\(.*?\)|\S+)\s+([a-z][a-z0-9-]*)\((.*)$)");
  std::istringstream in(hlo_text);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!line.empty() && line[0] != ' ' && std::regex_match(line, m, header)) {
      current = m[2];
      computations[current];
      if (m[1].matched) entry = current;
    } else if (!current.empty() && std::regex_match(line, m, instruction)) {
      computations[current].push_back({.type = m[1], .opcode = m[2], .attrs = m[3]});
    } else if (line == "}") {
      current.clear();
    }
  }
  TITAN_CHECK(!entry.empty(), "graph: the optimized HLO has no ENTRY computation (", hlo_text.size(), " characters)");
  std::map<std::string, CollectiveTally> tallies;
  CollectiveCount out;
  static const std::regex callee(R"((?:calls|body|to_apply|true_computation|false_computation)=%?([^\s,}]+))");
  static const std::regex branches(R"(branch_computations=\{([^}]*)\})");
  static const std::regex trips(R"re("known_trip_count":\{"n":"([0-9]+)"\})re");
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
      std::smatch m;
      if (ins.opcode == "while") {
        if (std::regex_search(ins.attrs, m, trips))
          inner *= std::stod(m[1]);
        else
          out.unknown_trips = true;
      }
      for (std::sregex_iterator c(ins.attrs.begin(), ins.attrs.end(), callee), end; c != end; ++c)
        walk((*c)[1], inner, depth + 1);
      if (std::regex_search(ins.attrs, m, branches)) {
        const std::string list = m[1];
        static const std::regex branch(R"(%?([^\s,]+))");
        for (std::sregex_iterator b(list.begin(), list.end(), branch), end; b != end; ++b) walk((*b)[1], inner, depth + 1);
      }
    }
  };
  walk(entry, 1.0, 0);
  for (const char* kind : kKinds)
    if (tallies.count(kind)) out.kinds.push_back(tallies[kind]);
  return out;
}

}  // namespace titan::graph
