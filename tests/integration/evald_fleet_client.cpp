// The client side of tests/integration/evald_fleet.py: submits every request of a JSONL file to a
// RemoteEvaluator at once and prints one line per result as its future becomes ready
// ("result <n> <request_id> <error_category>", flushed, so that the driver can kill servers at
// chosen points), then one line "stats <json>" with the evaluator's counters.
//   evald_fleet_client <endpoints> <requests.jsonl> [give_up_after_s]
#include <kbrl/core/json.hpp>
#include <kbrl/eval/remote_evaluator.hpp>

#include <boost/json.hpp>

#include <chrono>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

using namespace kbrl;
namespace json = boost::json;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: evald_fleet_client <endpoints> <requests.jsonl> [give_up_after_s]\n";
    return 2;
  }
  try {
    auto config = eval::remote_evaluator_config(argv[1]);
    // Quick reactions for a test of a few seconds: a joining server is seen within half a second,
    // and back-off stays short.
    config.refresh_s = 0.5;
    config.backoff_initial_s = 0.1;
    config.backoff_max_s = 2.0;
    config.give_up_after_s = argc > 3 ? std::stod(argv[3]) : 120.0;
    std::vector<core::EvalRequest> requests;
    std::ifstream in(argv[2]);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) requests.push_back(core::from_json<core::EvalRequest>(line));

    eval::RemoteEvaluator evaluator(config);
    std::vector<std::future<core::EvalResult>> futures;
    for (auto& r : requests) futures.push_back(evaluator.submit(r));
    std::vector<bool> done(futures.size(), false);
    std::size_t finished = 0;
    while (finished < futures.size()) {
      bool any = false;
      for (std::size_t i = 0; i < futures.size(); ++i) {
        if (done[i] || futures[i].wait_for(std::chrono::seconds(0)) != std::future_status::ready) continue;
        const core::EvalResult r = futures[i].get();
        done[i] = true;
        ++finished;
        any = true;
        std::cout << "result " << finished << " " << r.request_id << " " << core::to_string(r.error_category) << " "
                  << json::serialize(json::value(r.error_message.substr(0, 200))) << std::endl;
      }
      if (!any) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const auto s = evaluator.stats();
    json::object by_server;
    for (const auto& [origin, n] : s.results_by_server) by_server[origin] = n;
    std::cout << "stats "
              << json::serialize(json::object{{"submitted", s.submitted},
                                              {"delivered", s.delivered},
                                              {"batches", s.batches},
                                              {"redispatched", s.redispatched},
                                              {"queue_full", s.queue_full},
                                              {"draining", s.draining},
                                              {"server_failures", s.server_failures},
                                              {"gave_up", s.gave_up},
                                              {"connections_opened", s.connections_opened},
                                              {"results_by_server", by_server}})
              << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "evald_fleet_client: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
