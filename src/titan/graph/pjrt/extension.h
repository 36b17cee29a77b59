#pragma once
// An extension's type, as the plugin wrote it. Read as a plain int: a newer plugin has types that
// the header titan compiles against does not list (24 on the 0.115 CPU plugin), and loading one
// as that header's enum is undefined behaviour (UBSan stops on it).
#include <pjrt_c_api.h>

#include <cstring>

namespace titan::graph::pjrt {

inline int extension_type(const PJRT_Extension_Base* ext) {
  static_assert(sizeof(ext->type) == sizeof(int));
  int type = 0;
  std::memcpy(&type, &ext->type, sizeof type);
  return type;
}

}  // namespace titan::graph::pjrt
