#include "kbrl/model/torch/torch_tensors.hpp"

#include <ATen/ATen.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>

#include "catch.hpp"
#include "kbrl/core/error.hpp"
#include "test_files.hpp"

using namespace kbrl::model;
namespace fs = std::filesystem;

namespace {
fs::path cases() { return kbrl::test::model_data() / "safetensors"; }
}  // namespace

TEST_CASE("tensor_view maps every dtype without copying") {
  const SafetensorsFile f(cases() / "cases_all_dtypes.safetensors");
  const at::Tensor expected = at::arange(6, at::kDouble).reshape({2, 3});
  for (const TensorInfo& t : f.tensors()) {
    INFO(t.name);
    const at::Tensor v = tensor_view(f, t);
    CHECK(v.scalar_type() == to_scalar_type(t.dtype));
    CHECK(from_scalar_type(v.scalar_type()) == t.dtype);
    CHECK(v.data_ptr() == static_cast<void*>(f.bytes(t).data()));
    if (t.dtype == Dtype::BOOL) {
      CHECK(at::equal(v, (at::arange(6) % 2 == 1).reshape({2, 3})));
    } else if (t.dtype == Dtype::U16 || t.dtype == Dtype::U32 || t.dtype == Dtype::U64) {
      // torch has few kernels for these: compare the bytes of the low half-words.
      CHECK(v.view(at::kByte).reshape({6, -1}).select(1, 0).to(at::kDouble).reshape({2, 3}).equal(expected));
    } else {
      CHECK(v.to(at::kDouble).equal(expected));
    }
  }
}

TEST_CASE("tensor_view keeps the mapping alive and never writes the file") {
  const auto dir = kbrl::test::scratch("tensor_view_alive");
  fs::copy_file(cases() / "cases_all_dtypes.safetensors", dir / "f.safetensors");
  const std::string before = kbrl::test::read_bytes(dir / "f.safetensors");
  at::Tensor v;
  {
    const SafetensorsFile f(dir / "f.safetensors");
    v = tensor_view(f, "float32");
  }
  // The file object is gone; the view still reads (and may write) the mapped pages.
  CHECK(v.sum().item<float>() == 15.0f);
  v.mul_(2);
  CHECK(v.sum().item<float>() == 30.0f);
  CHECK(kbrl::test::read_bytes(dir / "f.safetensors") == before);
}

TEST_CASE("tensor_view copies tensors whose bytes are misaligned") {
  // A 5-byte header leaves the data at offset 13: a float32 there is not 4-byte aligned.
  const std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string data(8, '\0');
  const float values[2] = {1.5f, -2.0f};
  std::memcpy(data.data(), values, 8);
  std::string padded = header + std::string(5, ' ');
  const auto path = kbrl::test::scratch("tensor_view_misaligned") / "m.safetensors";
  kbrl::test::write_bytes(path, kbrl::test::safetensors_bytes(padded, data));
  const SafetensorsFile f(path);
  REQUIRE(reinterpret_cast<std::uintptr_t>(f.bytes("w").data()) % 4 != 0);
  const at::Tensor v = tensor_view(f, "w");
  CHECK(v.data_ptr() != static_cast<void*>(f.bytes("w").data()));
  CHECK(at::equal(v, at::tensor({1.5f, -2.0f})));
}

TEST_CASE("load_tensor converts dtype and owns its memory") {
  const Checkpoint ck(cases() / "cases_all_dtypes.safetensors");
  const at::Tensor t = load_tensor(ck, "bfloat16", at::TensorOptions().dtype(at::kFloat));
  CHECK(t.scalar_type() == at::kFloat);
  CHECK(t.equal(at::arange(6, at::kFloat).reshape({2, 3})));
  CHECK(t.data_ptr() != static_cast<void*>(ck.bytes("bfloat16").data()));
  const auto all = load_tensors(cases() / "cases_mixed.safetensors");
  CHECK(all.size() == 48);
  CHECK(all.at("scalar").dim() == 0);
  CHECK(all.at("scalar").item<float>() == 3.5f);
}

TEST_CASE("save_tensors writes what safetensors.torch.save_file writes") {
  const auto out = kbrl::test::scratch("save_tensors");
  for (const char* name : {"cases_all_dtypes.safetensors", "cases_mixed.safetensors", "cases_empty.safetensors"}) {
    INFO(name);
    const SafetensorsFile f(cases() / name);
    std::map<std::string, at::Tensor> tensors;
    for (const TensorInfo& t : f.tensors()) tensors[t.name] = tensor_view(f, t).clone();
    save_tensors(out / name, tensors, f.metadata());
    CHECK(kbrl::test::read_bytes(out / name) == kbrl::test::read_bytes(cases() / name));
  }
  // Non-contiguous input is written as its contiguous copy.
  const at::Tensor t = at::arange(6, at::kFloat).reshape({2, 3}).t();
  save_tensors(out / "t.safetensors", {{"t", t}});
  CHECK(load_tensors(out / "t.safetensors").at("t").equal(t.contiguous()));
}

TEST_CASE("safetensors dtypes without a torch equivalent are refused") {
  CHECK_THROWS_AS(to_scalar_type(Dtype::F4), kbrl::core::InvalidArgument);
  CHECK_THROWS_AS(from_scalar_type(at::kComplexDouble), kbrl::core::InvalidArgument);
}

TEST_CASE("std::filesystem works in a program that links kbrl::torch") {
  // The torch wheel exports an old copy of std::filesystem; called from code built against
  // the system's libstdc++ its remove_all crashed on any non-empty directory. kbrl::torch
  // links libstdc++ ahead of libtorch so that these calls bind to the system library.
  const auto dir = kbrl::test::scratch("filesystem_under_torch");
  fs::create_directories(dir / "a/b/c");
  kbrl::test::write_bytes(dir / "a/b/c/f.txt", "x");
  kbrl::test::write_bytes(dir / "a/g.txt", "y");
  CHECK(fs::remove_all(dir / "a") == 5);
  CHECK_FALSE(fs::exists(dir / "a"));
  fs::create_directories(dir / "src/d");
  kbrl::test::write_bytes(dir / "src/d/h.txt", "z");
  fs::copy(dir / "src", dir / "dst", fs::copy_options::recursive);
  CHECK(kbrl::test::read_bytes(dir / "dst/d/h.txt") == "z");
}
