// safetensors files as torch tensors (part of kbrl::torch). Two ways in: tensor_view maps a
// tensor without copying (CPU, the file's dtype, the mapping kept alive by the tensor), and
// load_tensor copies it to the dtype and device asked for. save_tensors writes a map of torch
// tensors byte-identically to safetensors.torch.save_file.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/core/TensorOptions.h>

#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include "kbrl/model/checkpoint.hpp"
#include "kbrl/model/safetensors.hpp"

namespace kbrl::model {

// F8_E4M3 is torch.float8_e4m3fn, as in safetensors' torch bindings. F4, F6_* have no torch
// dtype: they throw core::InvalidArgument (their bytes stay readable through SafetensorsFile).
c10::ScalarType to_scalar_type(Dtype dtype);
Dtype from_scalar_type(c10::ScalarType type);

// Zero-copy: a CPU tensor over the file's mapping, holding the mapping alive. The mapping is
// private, so writing into the tensor never changes the file. A tensor whose bytes are not
// aligned to its element size (possible only in files not written by the reference writer) is
// copied instead, since torch kernels assume aligned data.
at::Tensor tensor_view(const SafetensorsFile& file, const TensorInfo& info);
at::Tensor tensor_view(const SafetensorsFile& file, std::string_view name);

// A copy, converted to `options` (dtype and device; unset fields keep the file's dtype / CPU).
// The result owns its memory: the file may be closed or replaced afterwards.
at::Tensor load_tensor(const Checkpoint& checkpoint, std::string_view name, const c10::TensorOptions& options = {});
// Every tensor of a checkpoint (directory, index or single file), copied as load_tensor does.
std::map<std::string, at::Tensor> load_tensors(const std::filesystem::path& path,
                                               const c10::TensorOptions& options = {});

// Writes CPU or device tensors (moved to the CPU, made contiguous) as one safetensors file.
void save_tensors(const std::filesystem::path& path, const std::map<std::string, at::Tensor>& tensors,
                  const std::map<std::string, std::string>& metadata = {});

}  // namespace kbrl::model
