#include "titan/graph/pjrt/kv_callbacks.h"

#include <chrono>
#include <cstring>
#include <exception>
#include <string>

#include "titan/core/error.h"

namespace titan::graph::pjrt::detail {
namespace {

std::string key_of(const char* key, size_t size) { return "pjrt/" + std::string(key, size); }

PJRT_Error* fail(PJRT_CallbackError* callback_error, PJRT_Error_Code code, const std::string& message) {
  return (*callback_error)(code, message.data(), message.size());
}

// A copy the plugin frees with delete_value once it has copied it.
char* copy_of(const std::string& value) {
  char* out = new char[value.size() + 1];
  std::memcpy(out, value.data(), value.size());
  out[value.size()] = '\0';
  return out;
}
void delete_value(char* value) { delete[] value; }

// What the store threw, as the plugin's error: no exception may cross into the plugin's C code.
template <typename Call>
PJRT_Error* guarded(PJRT_CallbackError* callback_error, PJRT_Error_Code code, Call&& call) {
  try {
    call();
    return nullptr;
  } catch (const Error& e) {
    return fail(callback_error, code, e.message());
  } catch (const std::exception& e) {
    return fail(callback_error, PJRT_Error_Code_INTERNAL, e.what());
  }
}

PJRT_Error* get(PJRT_KeyValueGetCallback_Args* args) {
  auto* store = static_cast<KeyValueStore*>(args->user_arg);
  return guarded(args->callback_error, PJRT_Error_Code_DEADLINE_EXCEEDED, [&] {
    const std::string value =
        store->get(key_of(args->key, args->key_size), std::chrono::milliseconds(args->timeout_in_ms));
    args->value = copy_of(value);
    args->value_size = value.size();
    args->value_deleter_callback = delete_value;
  });
}

PJRT_Error* try_get(PJRT_KeyValueTryGetCallback_Args* args) {
  auto* store = static_cast<KeyValueStore*>(args->user_arg);
  const std::string key = key_of(args->key, args->key_size);
  std::optional<std::string> value;
  if (PJRT_Error* error = guarded(args->callback_error, PJRT_Error_Code_UNAVAILABLE, [&] { value = store->try_get(key); }))
    return error;
  if (!value) return fail(args->callback_error, PJRT_Error_Code_NOT_FOUND, "kv store: no key \"" + key + "\" yet");
  args->value = copy_of(*value);
  args->value_size = value->size();
  args->value_deleter_callback = delete_value;
  return nullptr;
}

PJRT_Error* put(PJRT_KeyValuePutCallback_Args* args) {
  auto* store = static_cast<KeyValueStore*>(args->user_arg);
  return guarded(args->callback_error, PJRT_Error_Code_UNAVAILABLE, [&] {
    store->put(key_of(args->key, args->key_size), std::string(args->value, args->value_size));
  });
}

}  // namespace

void set_kv_callbacks(PJRT_Client_Create_Args& args, KeyValueStore& store) {
  args.kv_get_callback = get;
  args.kv_get_user_arg = &store;
  args.kv_try_get_callback = try_get;
  args.kv_try_get_user_arg = &store;
  args.kv_put_callback = put;
  args.kv_put_user_arg = &store;
}

}  // namespace titan::graph::pjrt::detail
