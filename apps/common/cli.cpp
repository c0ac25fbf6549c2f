#include "cli.hpp"

#include <fmt/format.h>

#include <fstream>
#include <iostream>

#include "kbrl/core/error.hpp"
#include "kbrl/version.hpp"

namespace kbrl::apps {

std::string version_text(const std::string& program) {
  std::string text = program + " " + KBRL_VERSION;
  if (std::string(KBRL_GIT_DESCRIBE).size() > 0) text += std::string(" (git ") + KBRL_GIT_DESCRIBE + ")";
  return text;
}

int run_program(CLI::App& app, int argc, const char* const* argv, const std::function<int()>& body) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 prints help and version to stdout and errors to stderr; its own codes for errors
    // (106, 109, ...) all become the one usage code.
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  try {
    return body();
  } catch (const UsageError& e) {
    std::cerr << app.get_name() << ": " << e.what() << "\nRun with --help for more information.\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << app.get_name() << ": " << e.what() << "\n";
    return kExitError;
  }
}

namespace {

bool is_list(eval::SettingType t) {
  return t == eval::SettingType::integer_list || t == eval::SettingType::severity_map;
}

std::string group_title(const std::string& group) { return "Evaluator settings: " + group; }

}  // namespace

EvaluatorFlags::EvaluatorFlags(CLI::App& app, eval::SettingsProfile profile) : profile_(profile) {
  const auto defaults = eval::default_evaluator_settings(profile);
  for (const auto& setting : eval::evaluator_settings()) {
    Slot& slot = slots_.emplace_back();
    slot.setting = &setting;
    std::string help = setting.help;
    const auto value = setting.get(defaults);
    if (!std::holds_alternative<std::monostate>(value) && !eval::setting_text(value).empty())
      help += " [default: " + eval::setting_text(value) + "]";
    const std::string name = "--" + setting.flag;
    if (setting.type == eval::SettingType::boolean) {
      slot.option = app.add_flag(name + ",!--no-" + setting.flag, slot.flag, help);
    } else if (is_list(setting.type)) {
      // One value per occurrence (comma-separated items allowed), so that a following argument is
      // never taken as another item.
      slot.option = app.add_option(name, slot.values, help)->delimiter(',')->allow_extra_args(false);
    } else {
      slot.option = app.add_option(name, slot.value, help)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    }
    if (!setting.value_name().empty()) slot.option->type_name(setting.value_name());
    slot.option->group(group_title(setting.group));
  }
}

eval::EvaluatorSettings EvaluatorFlags::settings() const {
  auto settings = eval::default_evaluator_settings(profile_);
  for (const auto& slot : slots_) {
    if (slot.option->count() == 0) continue;
    eval::SettingValue value;
    if (slot.setting->type == eval::SettingType::boolean) value = std::string(slot.flag ? "true" : "false");
    else if (is_list(slot.setting->type)) value = slot.values;
    else value = slot.value;
    if (const auto error = slot.setting->set(settings, value); !error.empty())
      throw UsageError("--" + slot.setting->flag + ": " + error);
  }
  return settings;
}

std::pair<std::string, int> parse_listen(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos) throw UsageError(fmt::format("--listen: '{}' is not HOST:PORT", text));
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = -1;
  try {
    std::size_t used = 0;
    port = std::stoi(text.substr(colon + 1), &used);
    if (used != text.size() - colon - 1) port = -1;
  } catch (const std::exception&) {
    port = -1;
  }
  if (host.empty() || port < 0 || port > 65535)
    throw UsageError(fmt::format("--listen: '{}' is not HOST:PORT (port 0 to 65535; 0 picks a free one)", text));
  return {host, port};
}

void write_port_file(const std::filesystem::path& path, int port) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << port << "\n";
    if (!out) throw core::Error(fmt::format("--port-file: cannot write {}", tmp.string()));
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace kbrl::apps
