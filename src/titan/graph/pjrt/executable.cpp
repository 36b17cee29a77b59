#include "titan/graph/pjrt/executable.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "titan/core/error.h"
#include "titan/graph/pjrt/client_state.h"

namespace titan::graph::pjrt {
namespace {

std::string describe(DType dtype, const Shape& dims) {
  return std::string(dtype_name(dtype)) + shape_str(dims);
}

}  // namespace

Executable::Executable(std::shared_ptr<const detail::ClientState> client, PJRT_LoadedExecutable* executable,
                       double compile_seconds)
    : client_(std::move(client)), executable_(executable), compile_seconds_(compile_seconds) {
  const PJRT_Api* api = client_->api();
  PJRT_LoadedExecutable_GetExecutable_Args get{};
  get.struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE;
  get.loaded_executable = executable_;
  client_->check(api->PJRT_LoadedExecutable_GetExecutable(&get), "PJRT_LoadedExecutable_GetExecutable");
  PJRT_Executable_Name_Args name{};
  name.struct_size = PJRT_Executable_Name_Args_STRUCT_SIZE;
  name.executable = get.executable;
  PJRT_Error* name_error = api->PJRT_Executable_Name(&name);
  if (!name_error) name_.assign(name.executable_name, name.executable_name_size);
  PJRT_Executable_NumOutputs_Args outputs{};
  outputs.struct_size = PJRT_Executable_NumOutputs_Args_STRUCT_SIZE;
  outputs.executable = get.executable;
  PJRT_Error* outputs_error = api->PJRT_Executable_NumOutputs(&outputs);
  num_outputs_ = outputs.num_outputs;
  PJRT_Executable_Destroy_Args destroy{};
  destroy.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE;
  destroy.executable = get.executable;
  PJRT_Error* destroy_error = api->PJRT_Executable_Destroy(&destroy);
  client_->check(name_error, "PJRT_Executable_Name");
  client_->check(outputs_error, "PJRT_Executable_NumOutputs");
  client_->check(destroy_error, "PJRT_Executable_Destroy");
}

Executable::~Executable() {
  release();
}

Executable::Executable(Executable&& other) noexcept
    : client_(std::move(other.client_)),
      executable_(std::exchange(other.executable_, nullptr)),
      parameters_(std::move(other.parameters_)),
      name_(std::move(other.name_)),
      num_outputs_(other.num_outputs_),
      compile_seconds_(other.compile_seconds_) {}

Executable& Executable::operator=(Executable&& other) noexcept {
  if (this != &other) {
    release();
    client_ = std::move(other.client_);
    executable_ = std::exchange(other.executable_, nullptr);
    parameters_ = std::move(other.parameters_);
    name_ = std::move(other.name_);
    num_outputs_ = other.num_outputs_;
    compile_seconds_ = other.compile_seconds_;
  }
  return *this;
}

void Executable::release() {
  if (!executable_) return;
  PJRT_LoadedExecutable_Destroy_Args args{};
  args.struct_size = PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE;
  args.executable = std::exchange(executable_, nullptr);
  // Called from the destructor: a failure to free leaves nothing for the caller to do.
  if (PJRT_Error* error = client_->api()->PJRT_LoadedExecutable_Destroy(&args)) {
    PJRT_Error_Destroy_Args destroy{};
    destroy.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
    destroy.error = error;
    client_->api()->PJRT_Error_Destroy(&destroy);
  }
}

void Executable::check_arguments(const std::vector<Buffer*>& args, const std::vector<int>& donated,
                                 bool whole) const {
  TITAN_CHECK(executable_, "executable ", name_, " is empty (moved from)");
  TITAN_CHECK(args.size() == parameters_.size(), "executable ", name_, " takes ", parameters_.size(),
              " arguments (the parameters of its main), got ", args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    TITAN_CHECK(args[i], "argument ", i, " of executable ", name_, " is a null Buffer pointer");
    TITAN_CHECK(args[i]->donated_to().empty(), "argument ", i, " of executable ", name_,
                ": buffer was donated to ", args[i]->donated_to(),
                " by an earlier run: pass that run's output in its place");
    TITAN_CHECK(args[i]->valid(), "argument ", i, " of executable ", name_,
                " is an empty buffer (default-constructed or moved from)");
    TITAN_CHECK(args[i]->client_ == client_, "argument ", i, " of executable ", name_,
                " is a buffer of another PJRT client: copy it to the host and to this client's device");
    if (!whole) continue;
    const Parameter& p = parameters_[i];
    const bool dtype_ok = !p.dtype || *p.dtype == args[i]->dtype();
    const bool dims_ok = !p.dims || *p.dims == args[i]->dims();
    TITAN_CHECK(dtype_ok && dims_ok, "argument ", i, " of executable ", name_, ": expected ", p.type,
                ", found ", describe(args[i]->dtype(), args[i]->dims()));
  }
  for (size_t j = 0; j < donated.size(); ++j) {
    const int i = donated[j];
    TITAN_CHECK(i >= 0 && static_cast<size_t>(i) < args.size(), "donated index ", i, " of executable ", name_,
                " is out of range: it takes ", args.size(), " arguments");
    TITAN_CHECK(std::find(donated.begin(), donated.begin() + j, i) == donated.begin() + j, "donated index ",
                i, " of executable ", name_, " is listed twice");
    TITAN_CHECK(parameters_[i].aliased_output >= 0, "argument ", i, " of executable ", name_,
                " cannot be donated: its parameter in main has no {tf.aliasing_output = K : i32}; add it (K: "
                "the output that replaces it) or leave ",
                i, " out of donated");
    for (size_t k = 0; k < args.size(); ++k) {
      TITAN_CHECK(k == static_cast<size_t>(i) || args[k] != args[i], "argument ", i, " of executable ", name_,
                  " is donated but its buffer is also argument ", k, ": pass a copy");
    }
  }
}

std::vector<Buffer> Executable::execute(const std::vector<Buffer*>& args, const std::vector<int>& donated) {
  check_arguments(args, donated);
  std::vector<Buffer> results = std::move(launch({args}, donated).front());
  return results;
}

std::vector<std::vector<Buffer>> Executable::execute_partitioned(const std::vector<std::vector<Buffer*>>& args,
                                                                const std::vector<int>& donated) {
  TITAN_CHECK(executable_ != nullptr, "executable ", name_, " was moved from");
  PJRT_LoadedExecutable_AddressableDevices_Args devices{};
  devices.struct_size = PJRT_LoadedExecutable_AddressableDevices_Args_STRUCT_SIZE;
  devices.executable = executable_;
  client_->check(client_->api()->PJRT_LoadedExecutable_AddressableDevices(&devices),
                 "PJRT_LoadedExecutable_AddressableDevices");
  TITAN_CHECK(args.size() == devices.num_addressable_devices, "executable ", name_, " runs on ",
              devices.num_addressable_devices, " devices, but arguments for ", args.size(), " were given");
  for (const std::vector<Buffer*>& device_args : args) check_arguments(device_args, donated, /*whole=*/false);
  return launch(args, donated);
}

std::vector<std::vector<Buffer>> Executable::launch(const std::vector<std::vector<Buffer*>>& args,
                                                 const std::vector<int>& donated) {
  const PJRT_Api* api = client_->api();
  const size_t devices = args.size();
  std::vector<std::vector<PJRT_Buffer*>> inputs(devices);
  for (size_t d = 0; d < devices; ++d)
    for (Buffer* b : args[d]) inputs[d].push_back(b->handle());
  // Parameters the module aliases but the caller keeps: the runtime copies them instead.
  std::vector<int64_t> kept;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (parameters_[i].aliased_output >= 0 &&
        std::find(donated.begin(), donated.end(), static_cast<int>(i)) == donated.end()) {
      kept.push_back(static_cast<int64_t>(i));
    }
  }
  PJRT_ExecuteOptions options{};
  options.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE;
  options.non_donatable_input_indices = kept.data();
  options.num_non_donatable_input_indices = kept.size();
  std::vector<std::vector<PJRT_Buffer*>> outputs(devices, std::vector<PJRT_Buffer*>(num_outputs_, nullptr));
  std::vector<PJRT_Buffer* const*> argument_lists;
  std::vector<PJRT_Buffer**> output_lists;
  for (size_t d = 0; d < devices; ++d) {
    argument_lists.push_back(inputs[d].data());
    output_lists.push_back(outputs[d].data());
  }
  std::vector<PJRT_Event*> done(devices, nullptr);
  PJRT_LoadedExecutable_Execute_Args run{};
  run.struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE;
  run.executable = executable_;
  run.options = &options;
  run.argument_lists = argument_lists.data();
  run.num_devices = devices;
  run.num_args = inputs[0].size();
  run.output_lists = output_lists.data();
  run.device_complete_events = done.data();
  client_->check(api->PJRT_LoadedExecutable_Execute(&run), "PJRT_LoadedExecutable_Execute");
  // Own the outputs first, so that a failed run still frees them.
  std::vector<std::vector<Buffer>> results(devices);
  for (size_t d = 0; d < devices; ++d)
    for (PJRT_Buffer* out : outputs[d]) results[d].push_back(Buffer(client_, out, kF32, {}));
  for (const std::vector<Buffer*>& device_args : args)
    for (int i : donated) device_args[i]->mark_donated(name_);
  // Every device's event is awaited (and freed) before the first failure is reported.
  std::exception_ptr failed;
  for (PJRT_Event* e : done) {
    try {
      client_->await(e, ("running " + name_).c_str());
    } catch (...) {
      if (!failed) failed = std::current_exception();
    }
  }
  if (failed) std::rethrow_exception(failed);
  for (std::vector<Buffer>& device_results : results)
    for (size_t k = 0; k < device_results.size(); ++k) {
      Buffer& r = device_results[k];
      PJRT_Buffer_ElementType_Args type{};
      type.struct_size = PJRT_Buffer_ElementType_Args_STRUCT_SIZE;
      type.buffer = r.buffer_;
      client_->check(api->PJRT_Buffer_ElementType(&type), "PJRT_Buffer_ElementType");
      r.dtype_ = detail::from_pjrt(type.type, "output " + std::to_string(k) + " of " + name_);
      PJRT_Buffer_Dimensions_Args dims{};
      dims.struct_size = PJRT_Buffer_Dimensions_Args_STRUCT_SIZE;
      dims.buffer = r.buffer_;
      client_->check(api->PJRT_Buffer_Dimensions(&dims), "PJRT_Buffer_Dimensions");
      r.dims_.assign(dims.dims, dims.dims + dims.num_dims);
    }
  return results;
}

}  // namespace titan::graph::pjrt
