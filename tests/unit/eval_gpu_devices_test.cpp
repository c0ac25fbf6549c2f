// Which device node the sandbox gives a GPU lane: the NVIDIA driver's own list of its GPUs, in
// PCI bus order (the order of --gpus and nvidia-smi), mapped to their minor numbers.
#include <kbrl/eval/local_evaluator.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "catch.hpp"

namespace fs = std::filesystem;

namespace {
void gpu(const fs::path& dir, const std::string& bus, int minor) {
  fs::create_directories(dir / bus);
  std::ofstream(dir / bus / "information") << "Model: \t\t NVIDIA H100 80GB HBM3\nGPU UUID: \t GPU-0000\n"
                                           << "Bus Location: \t " << bus << "\nDevice Minor: \t " << minor
                                           << "\nGPU Excluded:\t No\n";
}
}  // namespace

TEST_CASE("a GPU's device node is found by its place in bus order, whatever its minor number") {
  const fs::path dir = fs::path(KBRL_TEST_TMP) / "driver-gpus";
  fs::remove_all(dir);
  // Listed out of order, with minor numbers that are not the bus order.
  gpu(dir, "0000:9a:00.0", 0);
  gpu(dir, "0000:18:00.0", 3);
  gpu(dir, "0000:3b:00.0", 1);
  CHECK(kbrl::eval::nvidia_device_node(0, dir) == "/dev/nvidia3");
  CHECK(kbrl::eval::nvidia_device_node(1, dir) == "/dev/nvidia1");
  CHECK(kbrl::eval::nvidia_device_node(2, dir) == "/dev/nvidia0");
  // Past the driver's list, or without one: the index itself.
  CHECK(kbrl::eval::nvidia_device_node(3, dir) == "/dev/nvidia3");
  CHECK(kbrl::eval::nvidia_device_node(1, dir / "missing") == "/dev/nvidia1");
  fs::remove_all(dir);
}
