#include "titan/core/meta.h"

namespace titan {

namespace {
// Per thread: a scope on the thread building a model must not turn another thread's activations
// into meta tensors.
thread_local bool meta_active = false;
}  // namespace

MetaScope::MetaScope(bool on) : previous_(meta_active) {
  meta_active = on;
}

MetaScope::~MetaScope() {
  meta_active = previous_;
}

bool MetaScope::active() {
  return meta_active;
}

}  // namespace titan
