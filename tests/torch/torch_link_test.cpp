#include <ATen/ATen.h>
#include <torch/version.h>

#include <string>

#include "catch.hpp"

TEST_CASE("libtorch is the one of the Python torch wheel") {
  // Python reports e.g. "2.11.0+cu130"; the C++ macro carries the release part.
  const std::string py = KBRL_TORCH_PY_VERSION;
  const std::string cxx = TORCH_VERSION;
  REQUIRE(py.substr(0, py.find('+')) == cxx);
}

TEST_CASE("libtorch computes on the CPU") {
  const auto a = at::arange(6, at::kFloat).reshape({2, 3});
  const auto b = at::ones({3, 2});
  const auto c = at::matmul(a, b);
  REQUIRE(c.size(0) == 2);
  REQUIRE(c[0][0].item<float>() == 3.0f);  // 0 + 1 + 2
  REQUIRE(c[1][1].item<float>() == 12.0f);  // 3 + 4 + 5
}
