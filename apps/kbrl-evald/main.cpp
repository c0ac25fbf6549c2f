// kbrl-evald: the evaluation service (docs/services.md): a LocalEvaluator on the network.
//   kbrl-evald [--listen HOST:PORT] [--token-file FILE] [--journal DIR] [evaluator settings...]
// Flags and composition only: the routes, queue, journal and metrics are eval::EvaluationService,
// the transport net::HttpServer, the evaluator's settings the same table kbrl-eval's come from.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "cli.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/core/file.hpp"
#include "kbrl/eval/evaluation_service.hpp"
#include "kbrl/eval/local_evaluator.hpp"
#include "kbrl/eval/settings.hpp"
#include "kbrl/net/http_server.hpp"

namespace fs = std::filesystem;
using namespace kbrl;

namespace {

struct ServiceFlags {
  std::string listen = "0.0.0.0:8470";
  std::string port_file;
  std::string token_file;
  std::string tls_cert, tls_key;
  std::size_t max_queue = 0;
  std::size_t max_body_bytes = 64ull << 20;
  std::size_t max_batch = 1024;
  std::string journal;
  int io_threads = 2;
};

std::string read_token(const ServiceFlags& f) {
  if (!f.token_file.empty()) {
    const std::string text = core::read_file(f.token_file);
    std::string token = text.substr(0, text.find('\n'));
    while (!token.empty() && (token.back() == '\r' || token.back() == ' ' || token.back() == '\t')) token.pop_back();
    if (token.empty()) throw core::Error(fmt::format("--token-file {}: the first line is empty", f.token_file));
    return token;
  }
  if (const char* env = std::getenv("KBRL_EVALD_TOKEN"); env != nullptr && *env != '\0') return env;
  return {};
}

int serve(const ServiceFlags& f, const eval::EvaluatorSettings& settings) {
  const auto [host, port] = apps::parse_listen(f.listen);
  if (f.tls_cert.empty() != f.tls_key.empty()) throw apps::UsageError("--tls-cert and --tls-key go together");
  if (f.max_batch == 0) throw apps::UsageError("--max-batch: 0 is below 1");
  if (f.io_threads < 1) throw apps::UsageError("--io-threads: must be at least 1");
  if (!settings.endpoints.empty())
    throw apps::UsageError("--endpoints: kbrl-evald evaluates on this machine; it does not forward to other servers");
  const std::string token = read_token(f);

  // SIGTERM and SIGINT are taken by sigwait below, in this thread: blocked here before any thread
  // starts, so that every thread inherits the mask (the worker processes get theirs reset).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // Listening first: a port in use fails in milliseconds, before any worker starts. Until the
  // service exists the server answers 503.
  std::atomic<eval::EvaluationService*> routes{nullptr};
  net::HttpServerConfig hc;
  hc.host = host;
  hc.port = port;
  hc.threads = f.io_threads;
  hc.max_body_bytes = f.max_body_bytes;
  hc.tls_cert = f.tls_cert;
  hc.tls_key = f.tls_key;
  net::HttpServer server(hc, [&routes](const net::HttpRequest& r) -> net::HandlerResult {
    if (auto* service = routes.load()) return service->handle(r);
    return net::HttpResponse::error(503, "starting");
  });

  eval::LocalEvaluator evaluator(eval::local_evaluator_config(settings));
  evaluator.start_workers();
  const auto& local = evaluator.config();
  eval::EvaluationServiceConfig sc;
  sc.compile_workers = local.compile_workers;
  sc.run_lanes = local.platform == core::DevicePlatform::cpu ? local.cpu_run_lanes : static_cast<int>(local.devices.size());
  sc.max_queue = f.max_queue;
  sc.max_batch = f.max_batch;
  sc.journal_dir = f.journal.empty() ? local.work_dir / "evald-journal" : fs::path(f.journal);
  sc.token = token;
  sc.default_options = settings.options;
  sc.ready = [&evaluator] { return evaluator.workers_ready(); };
  eval::EvaluationService service(evaluator, sc);
  routes = &service;
  // Whatever ends this scope, the server stops before the service it calls is destroyed.
  struct StopServerFirst {
    net::HttpServer& server;
    std::atomic<eval::EvaluationService*>& routes;
    ~StopServerFirst() {
      server.stop();
      routes = nullptr;
    }
  } stop_server_first{server, routes};
  if (!f.port_file.empty()) apps::write_port_file(f.port_file, server.port());
  const auto cap = service.capacity();
  std::cerr << fmt::format(
      "kbrl-evald: listening on {}://{}:{} ({} backend, concurrency {} = {} compile workers + {} run lanes, queue {}, "
      "journal {}{})\n",
      f.tls_cert.empty() ? "http" : "https", host, server.port(), core::to_string(local.platform), cap.concurrency,
      cap.compile_workers, cap.run_lanes, cap.max_queue, sc.journal_dir.string(),
      token.empty() ? "; no token: anyone who can reach this port can run code here" : "");

  int sig = 0;
  sigwait(&signals, &sig);
  std::cerr << fmt::format("kbrl-evald: {}: draining (new evaluations refused, accepted ones finish)\n",
                           sig == SIGTERM ? "SIGTERM" : "SIGINT");
  service.begin_drain();
  // A second signal ends the drain early: what was not delivered is lost to its clients (they
  // send it elsewhere), what finished is in the journal.
  std::atomic<bool> drained{false};
  std::atomic<bool> interrupted{false};
  std::thread second([&] {
    timespec poll{0, 200'000'000};
    while (!drained) {
      siginfo_t info;
      if (sigtimedwait(&signals, &info, &poll) > 0) {
        interrupted = true;
        return;
      }
    }
  });
  bool complete = false;
  while (!interrupted && !complete) complete = service.wait_drained(0.2);
  drained = true;
  second.join();
  server.stop_accepting();
  // The last chunks of the streams are queued: give the io threads a moment to send them.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  server.stop();
  std::cerr << fmt::format("kbrl-evald: {} ({} evaluations run)\n", complete ? "drained" : "stopped before the drain ended",
                           service.evaluations_run());
  return complete ? apps::kExitOk : apps::kExitInterrupted;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "Serves evaluations over HTTP (docs/services.md): POST /v1/evaluations, GET /v1/evaluations/ID, "
      "/v1/capacity, /healthz, /readyz, /metrics. The evaluator settings are kbrl-eval's; the evaluation options "
      "among them are the defaults of what a request leaves out.",
      "kbrl-evald");
  app.set_version_flag("--version", apps::version_text("kbrl-evald"));
  app.footer(
      "Exit codes: 0 drained after SIGTERM or SIGINT (accepted work finished and delivered), 1 error (a missing or "
      "malformed file, a port in use), 2 usage, 130 stopped by a second signal before the drain ended.");
  ServiceFlags f;
  const std::string group = "Service";
  app.add_option("--listen", f.listen, "HOST:PORT to listen on; port 0 picks a free one [default: 0.0.0.0:8470]")
      ->type_name("HOST:PORT")
      ->group(group);
  app.add_option("--port-file", f.port_file, "write the bound port here once listening")->type_name("FILE")->group(group);
  app.add_option("--token-file", f.token_file,
                 "the bearer token clients must send (first line); else $KBRL_EVALD_TOKEN; else no auth")
      ->type_name("FILE")
      ->group(group);
  app.add_option("--tls-cert", f.tls_cert, "PEM certificate (chain): serve HTTPS only")->type_name("FILE")->group(group);
  app.add_option("--tls-key", f.tls_key, "PEM private key of --tls-cert")->type_name("FILE")->group(group);
  app.add_option("--max-queue", f.max_queue, "requests waiting beyond those in flight; more: 429 [default: 4 x concurrency]")
      ->type_name("N")
      ->group(group);
  app.add_option("--max-body-bytes", f.max_body_bytes, "largest request body; larger: 413 [default: 67108864]")
      ->type_name("BYTES")
      ->check(CLI::PositiveNumber)
      ->group(group);
  app.add_option("--max-batch", f.max_batch, "requests per POST; more: 413 [default: 1024]")->type_name("N")->group(group);
  app.add_option("--journal", f.journal, "the journal of finished evaluations [default: WORK_DIR/evald-journal]")
      ->type_name("DIR")
      ->group(group);
  app.add_option("--io-threads", f.io_threads, "HTTP io threads [default: 2]")->type_name("N")->group(group);
  apps::EvaluatorFlags eval_flags(app, eval::SettingsProfile::evaluation);
  return apps::run_program(app, argc, argv, [&] { return serve(f, eval_flags.settings()); });
}
