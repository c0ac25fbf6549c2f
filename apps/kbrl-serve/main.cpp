// kbrl-serve: an OpenAI-compatible server over the in-process libtorch policy (docs/services.md).
//   kbrl-serve --model DIR [--adapter DIR [--adapter-name NAME]] [--listen HOST:PORT] [...]
// Flags and composition only: the model is ServedModel (the one translation unit with libtorch),
// the sampling thread the Batcher, the routes OpenAiService, the transport net::HttpServer.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "batcher.hpp"
#include "cli.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/net/http_server.hpp"
#include "openai_service.hpp"
#include "served_model.hpp"

namespace fs = std::filesystem;
using namespace kbrl;

namespace {

struct Flags {
  std::string model;
  std::string adapter;
  std::string adapter_name;
  std::string served_model_name;
  std::string device = "auto";
  std::string dtype = "auto";
  std::string chat_template = "auto";
  bool no_cuda_graphs = false;
  std::string listen = "127.0.0.1:8000";
  std::string port_file;
  std::size_t max_batch = 64;
  double batch_wait_ms = 5;
  std::string api_key_env;
  std::int64_t max_model_len = 0;
  int max_n = 128;
  std::int64_t default_max_tokens = 4096;
  int io_threads = 4;
  std::size_t max_body_bytes = 16ull << 20;
};

// One line per event on stderr, whole lines even from several threads, with the wall time.
void log_line(const std::string& line) {
  static std::mutex mu;
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  localtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%H:%M:%S", &tm);
  const std::string text = fmt::format("kbrl-serve {}.{:03d}: {}\n", stamp, ms, line);
  std::lock_guard lock(mu);
  std::cerr << text << std::flush;
}

std::string folder_name(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

int run_server(const Flags& f) {
  const auto [host, port] = apps::parse_listen(f.listen);
  if (f.max_batch == 0) throw apps::UsageError("--max-batch: 0 is below 1");
  if (!(f.batch_wait_ms >= 0)) throw apps::UsageError("--batch-wait-ms: must be at least 0");
  if (f.io_threads < 1) throw apps::UsageError("--io-threads: must be at least 1");
  if (f.max_n < 1) throw apps::UsageError("--max-n: must be at least 1");
  if (f.default_max_tokens < 1) throw apps::UsageError("--default-max-tokens: must be at least 1");
  if (f.max_model_len < 0) throw apps::UsageError("--max-model-len: must be at least 0");
  if (!fs::is_directory(f.model)) throw core::Error(fmt::format("--model {}: not a folder", f.model));
  std::string api_key;
  if (!f.api_key_env.empty()) {
    const char* key = std::getenv(f.api_key_env.c_str());
    if (key == nullptr || *key == '\0')
      throw apps::UsageError(fmt::format("--api-key-env: the environment variable {} is not set", f.api_key_env));
    api_key = key;
  }

  // SIGTERM and SIGINT are taken by sigwait below: blocked before any thread starts, so that
  // every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  serve::ServedModelOptions mo;
  mo.model = f.model;
  mo.device = f.device;
  mo.dtype = f.dtype;
  mo.chat_template = f.chat_template;
  mo.cuda_graphs = !f.no_cuda_graphs;
  const auto load_start = std::chrono::steady_clock::now();
  auto model = serve::load_served_model(mo);
  const std::string name = f.served_model_name.empty() ? folder_name(f.model) : f.served_model_name;
  log_line(fmt::format("loaded {} ({}) in {:.1f} s", f.model, model->describe(),
                       std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count()));
  if (!f.adapter.empty()) {
    const std::string adapter_name = f.adapter_name.empty() ? folder_name(f.adapter) : f.adapter_name;
    if (adapter_name == name)
      throw apps::UsageError(fmt::format("--adapter-name: '{}' is the base model's name too", adapter_name));
    model->load_adapter(adapter_name, f.adapter);
    log_line(fmt::format("loaded adapter '{}' from {}", adapter_name, f.adapter));
  }

  serve::BatcherConfig bc;
  bc.max_batch = f.max_batch;
  bc.batch_wait_ms = f.batch_wait_ms;
  serve::Batcher batcher(*model, bc, log_line);
  serve::OpenAiServiceConfig sc;
  sc.served_model_name = name;
  sc.api_key = api_key;
  sc.max_model_len = f.max_model_len > 0 ? f.max_model_len : model->context_length();
  sc.max_n = f.max_n;
  sc.default_max_tokens = f.default_max_tokens;
  serve::OpenAiService service(*model, batcher, sc, log_line);

  net::HttpServerConfig hc;
  hc.host = host;
  hc.port = port;
  hc.threads = f.io_threads;
  hc.max_body_bytes = f.max_body_bytes;
  net::HttpServer server(hc, [&service](const net::HttpRequest& r) { return service.handle(r); });
  if (!f.port_file.empty()) apps::write_port_file(f.port_file, server.port());
  log_line(fmt::format("serving '{}' on http://{}:{}/v1 (max batch {} rows, batch wait {} ms, context {} tokens{})", name,
                       host, server.port(), f.max_batch, f.batch_wait_ms, sc.max_model_len,
                       api_key.empty() ? ", no API key" : ", API key required"));

  int sig = 0;
  sigwait(&signals, &sig);
  log_line(fmt::format("{}: finishing the accepted requests", sig == SIGTERM ? "SIGTERM" : "SIGINT"));
  server.stop_accepting();
  // A second signal stops at once: the requests still waiting are answered with an error.
  std::atomic<bool> drained{false};
  std::thread second([&] {
    timespec poll{0, 200'000'000};
    while (!drained) {
      siginfo_t info;
      if (sigtimedwait(&signals, &info, &poll) > 0) {
        batcher.stop();
        return;
      }
    }
  });
  batcher.drain();
  drained = true;
  second.join();
  // The last chunks are queued: give the io threads a moment to send them.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  server.stop();
  batcher.stop();
  const auto stats = batcher.stats();
  log_line(fmt::format("stopped ({} requests in {} batches)", stats.jobs, stats.batches));
  return apps::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "Serves a Hugging Face checkpoint (and LoRA adapters) over an OpenAI-compatible HTTP API (docs/services.md): "
      "GET /v1/models, POST /v1/chat/completions, /v1/completions (streaming too), /v1/embeddings (mean-pooled last "
      "hidden states), /v1/load_lora_adapter, "
      "/v1/unload_lora_adapter, GET /health. Requests from all clients are sampled together in batches.",
      "kbrl-serve");
  app.set_version_flag("--version", apps::version_text("kbrl-serve"));
  app.footer("Exit codes: 0 stopped by SIGTERM or SIGINT after the accepted requests were answered, 1 error (a missing "
             "or malformed checkpoint, a port in use), 2 usage.");
  Flags f;
  const std::string mg = "Model";
  app.add_option("--model", f.model, "Hugging Face checkpoint folder (config.json, *.safetensors, tokenizer.json)")
      ->type_name("DIR")
      ->required()
      ->group(mg);
  app.add_option("--adapter", f.adapter, "a PEFT LoRA adapter folder to serve from the start")->type_name("DIR")->group(mg);
  app.add_option("--adapter-name", f.adapter_name, "the name requests use for --adapter [default: its folder's name]")
      ->type_name("NAME")
      ->group(mg);
  app.add_option("--served-model-name", f.served_model_name, "the base model's id [default: the checkpoint folder's name]")
      ->type_name("NAME")
      ->group(mg);
  app.add_option("--device", f.device, "auto (cuda:0 when there is a GPU), cpu, cuda, cuda:N [default: auto]")
      ->type_name("DEVICE")
      ->group(mg);
  app.add_option("--dtype", f.dtype, "auto (bf16 on a GPU, fp32 on the CPU), bf16, fp32 [default: auto]")
      ->type_name("DTYPE")
      ->group(mg);
  app.add_option("--chat-template", f.chat_template, "auto (from the tokenizer) or a renderer name [default: auto]")
      ->type_name("NAME")
      ->group(mg);
  app.add_flag("--no-cuda-graphs", f.no_cuda_graphs, "decode without CUDA graphs")->group(mg);
  app.add_option("--max-model-len", f.max_model_len,
                 "prompt + completion tokens at most [default: config.json's max_position_embeddings]")
      ->type_name("N")
      ->group(mg);
  const std::string sg = "Service";
  app.add_option("--listen", f.listen, "HOST:PORT to listen on; port 0 picks a free one [default: 127.0.0.1:8000]")
      ->type_name("HOST:PORT")
      ->group(sg);
  app.add_option("--port-file", f.port_file, "write the bound port here once listening")->type_name("FILE")->group(sg);
  app.add_option("--api-key-env", f.api_key_env,
                 "the environment variable holding the key clients must send (Authorization: Bearer KEY); "
                 "unset: no key needed")
      ->type_name("VAR")
      ->group(sg);
  app.add_option("--max-batch", f.max_batch, "rows (prompts x n) decoded together at most [default: 64]")
      ->type_name("N")
      ->group(sg);
  app.add_option("--batch-wait-ms", f.batch_wait_ms,
                 "after a request arrives at an idle sampler, wait this long for others to join its batch [default: 5]")
      ->type_name("MS")
      ->group(sg);
  app.add_option("--default-max-tokens", f.default_max_tokens,
                 "a chat request without max_tokens gets what the context leaves, at most this many [default: 4096]")
      ->type_name("N")
      ->group(mg);
  app.add_option("--max-n", f.max_n, "the largest n a request may ask for [default: 128]")->type_name("N")->group(sg);
  app.add_option("--io-threads", f.io_threads, "HTTP io threads [default: 4]")->type_name("N")->group(sg);
  app.add_option("--max-body-bytes", f.max_body_bytes, "largest request body; larger: 413 [default: 16777216]")
      ->type_name("BYTES")
      ->check(CLI::PositiveNumber)
      ->group(sg);
  return apps::run_program(app, argc, argv, [&] { return run_server(f); });
}
