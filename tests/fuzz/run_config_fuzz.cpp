// Fuzz target: kbrl-train's YAML run configuration (train::load_run_config). The input is
// written to a scratch file and loaded; a bad file throws core::ConfigError. A configuration
// that loads is written back as kbrl-train writes config.yaml into a run directory, and that
// file must load to the same configuration: a resumed run reads it.
#include "fuzz_support.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/train/run_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using kbrl::fuzz::require;
  std::string written;
  try {
    const kbrl::train::RunConfig config =
        kbrl::train::load_run_config(kbrl::fuzz::scratch().write("run.yaml", kbrl::fuzz::as_text(data, size)), {});
    written = kbrl::train::to_yaml(config);
  } catch (const kbrl::core::Error&) {
    return 0;
  }
  // Outside the try: the resolved file failing to load is a finding, whatever it throws.
  const kbrl::train::RunConfig reloaded =
      kbrl::train::load_run_config(kbrl::fuzz::scratch().write("config.yaml", written), {});
  require(kbrl::train::to_yaml(reloaded) == written, "the resolved config.yaml loads back to the same configuration");
  return 0;
}
