#include "kbrl/model/torch/torch_tensors.hpp"

#include <ATen/ATen.h>

#include <cstring>

#include "kbrl/core/error.hpp"
#include "kbrl/core/text.hpp"

namespace kbrl::model {

c10::ScalarType to_scalar_type(Dtype dtype) {
  switch (dtype) {
    case Dtype::BOOL: return at::kBool;
    case Dtype::U8: return at::kByte;
    case Dtype::I8: return at::kChar;
    case Dtype::F8_E5M2: return at::kFloat8_e5m2;
    case Dtype::F8_E4M3: return at::kFloat8_e4m3fn;
    case Dtype::F8_E8M0: return at::kFloat8_e8m0fnu;
    case Dtype::F8_E4M3FNUZ: return at::kFloat8_e4m3fnuz;
    case Dtype::F8_E5M2FNUZ: return at::kFloat8_e5m2fnuz;
    case Dtype::I16: return at::kShort;
    case Dtype::U16: return at::kUInt16;
    case Dtype::F16: return at::kHalf;
    case Dtype::BF16: return at::kBFloat16;
    case Dtype::I32: return at::kInt;
    case Dtype::U32: return at::kUInt32;
    case Dtype::F32: return at::kFloat;
    case Dtype::C64: return at::kComplexFloat;
    case Dtype::F64: return at::kDouble;
    case Dtype::I64: return at::kLong;
    case Dtype::U64: return at::kUInt64;
    case Dtype::F4:
    case Dtype::F6_E2M3:
    case Dtype::F6_E3M2: break;
  }
  throw core::InvalidArgument(core::cat("safetensors dtype ", dtype_name(dtype), " has no torch equivalent"));
}

Dtype from_scalar_type(c10::ScalarType type) {
  for (int i = 0; i <= static_cast<int>(Dtype::U64); ++i) {
    const auto d = static_cast<Dtype>(i);
    if (d == Dtype::F4 || d == Dtype::F6_E2M3 || d == Dtype::F6_E3M2) continue;
    if (to_scalar_type(d) == type) return d;
  }
  throw core::InvalidArgument(core::cat("torch dtype ", c10::toString(type), " has no safetensors equivalent"));
}

at::Tensor tensor_view(const SafetensorsFile& file, const TensorInfo& info) {
  const auto type = to_scalar_type(info.dtype);
  const std::span<std::byte> bytes = file.bytes(info);
  const auto options = at::TensorOptions().dtype(type).device(at::kCPU);
  const std::size_t item = c10::elementSize(type);
  if (reinterpret_cast<std::uintptr_t>(bytes.data()) % item != 0) {
    at::Tensor copy = at::empty(info.shape, options);
    std::memcpy(copy.data_ptr(), bytes.data(), bytes.size());
    return copy;
  }
  // The deleter owns a reference to the mapping: the view keeps the file mapped.
  std::shared_ptr<const void> keep = file.keep_alive();
  return at::from_blob(
      bytes.data(), info.shape, [keep](void*) mutable { keep.reset(); }, options);
}

at::Tensor tensor_view(const SafetensorsFile& file, std::string_view name) { return tensor_view(file, file.info(name)); }

at::Tensor load_tensor(const Checkpoint& checkpoint, std::string_view name, const c10::TensorOptions& options) {
  const SafetensorsFile& file = checkpoint.file_of(name);
  const at::Tensor view = tensor_view(file, file.info(name));
  const auto dtype = options.has_dtype() ? c10::typeMetaToScalarType(options.dtype()) : view.scalar_type();
  const auto device = options.has_device() ? options.device() : view.device();
  return view.to(device, dtype, /*non_blocking=*/false, /*copy=*/true);
}

std::map<std::string, at::Tensor> load_tensors(const std::filesystem::path& path, const c10::TensorOptions& options) {
  const Checkpoint checkpoint(path);
  std::map<std::string, at::Tensor> out;
  for (const std::string& name : checkpoint.tensor_names()) out.emplace(name, load_tensor(checkpoint, name, options));
  return out;
}

void save_tensors(const std::filesystem::path& path, const std::map<std::string, at::Tensor>& tensors,
                  const std::map<std::string, std::string>& metadata) {
  std::map<std::string, at::Tensor> cpu;  // keeps the contiguous CPU copies alive while writing
  std::map<std::string, TensorToWrite> views;
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) throw core::ConfigError(path.string(), "tensor '" + name + "'", "is undefined");
    const at::Tensor c = t.to(at::kCPU).contiguous();
    cpu.emplace(name, c);
    TensorToWrite w;
    w.dtype = from_scalar_type(c.scalar_type());
    w.shape.assign(c.sizes().begin(), c.sizes().end());
    w.bytes = {static_cast<const std::byte*>(c.const_data_ptr()), c.nbytes()};
    views.emplace(name, std::move(w));
  }
  write_safetensors(path, views, metadata);
}

}  // namespace kbrl::model
