// An outside program using kbrl::torch (found through find_package(kbrl)): writes tensors as
// safetensors, reads them back, and checks a small decoder-free computation on them.
#include <kbrl/model/torch/torch_tensors.hpp>

#include <ATen/ATen.h>

#include <filesystem>
#include <iostream>

int main(int argc, char** argv) {
  const std::filesystem::path dir = argc > 1 ? argv[1] : std::filesystem::temp_directory_path();
  const auto path = dir / "kbrl_torch_consumer.safetensors";
  const at::Tensor w = at::arange(6, at::kFloat).reshape({2, 3});
  kbrl::model::save_tensors(path, {{"w", w}, {"b", at::ones({2}, at::kBFloat16)}}, {{"format", "pt"}});
  const auto back = kbrl::model::load_tensors(path);
  if (!back.at("w").equal(w) || back.at("b").scalar_type() != at::kBFloat16) return 1;
  std::filesystem::remove_all(path);
  std::cout << "kbrl torch consumer ok " << back.at("w").sum().item<float>() << "\n";
  return 0;
}
