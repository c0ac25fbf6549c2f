#include "batcher.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <tuple>

namespace kbrl::serve {

std::uint64_t prompt_key(std::uint64_t seed, std::uint64_t index) {
  auto mix = [](std::uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
  };
  return mix(mix(seed) ^ index);
}

RowText::RowText(const tokenizer::Tokenizer& tokenizer, const std::vector<std::string>& stop, std::int64_t max_tokens)
    : decoder_(tokenizer, /*skip_special_tokens=*/true), stop_(&stop), max_tokens_(max_tokens) {
  for (const auto& s : stop) longest_stop_ = std::max(longest_stop_, s.size());
}

bool RowText::add(std::int64_t token, float logprob, bool sampler_finished, bool stop_token, RowUpdate& out) {
  out.text.clear();
  out.tokens.assign(1, token);
  out.logprobs.assign(1, logprob);
  out.finish_reason = nullptr;
  if (finished_) return true;
  ++count_;
  const std::size_t before = text_.size();
  // The stop token's own text is not part of the answer (as Policy::completion decodes it).
  if (!stop_token) text_ += decoder_.step(static_cast<tokenizer::TokenId>(token));
  const bool at_limit = count_ >= max_tokens_ || sampler_finished;
  if (stop_token || at_limit) text_ += decoder_.flush();
  // A stop string: only a match that ends in the new text can be new; the answer ends before it.
  std::size_t cut = std::string::npos;
  if (longest_stop_ > 0) {
    const std::size_t from = before + 1 > longest_stop_ ? before + 1 - longest_stop_ : 0;
    for (const auto& s : *stop_) cut = std::min(cut, text_.find(s, from));
  }
  if (cut != std::string::npos) {
    text_.resize(cut);
    out.finish_reason = "stop";
  } else if (stop_token) {
    out.finish_reason = "stop";
  } else if (at_limit) {
    out.finish_reason = "length";
  }
  finished_ = out.finish_reason != nullptr;
  std::size_t safe = text_.size();
  if (!finished_ && longest_stop_ > 1) {
    // Hold back what could be the start of a stop string, and never split a UTF-8 character.
    safe = text_.size() >= longest_stop_ - 1 ? text_.size() - (longest_stop_ - 1) : 0;
    while (safe > sent_ && safe < text_.size() && (static_cast<unsigned char>(text_[safe]) & 0xC0) == 0x80) --safe;
  }
  if (safe > sent_) {
    out.text = text_.substr(sent_, safe - sent_);
    sent_ = safe;
  }
  return finished_;
}

Batcher::Batcher(ServedModel& model, BatcherConfig config, std::function<void(const std::string&)> log)
    : model_(model), config_(config), log_(std::move(log)) {
  if (config_.max_batch == 0) config_.max_batch = 1;
  thread_ = std::thread([this] { run(); });
}

Batcher::~Batcher() { stop(); }

void Batcher::submit(SamplingJob job, JobCallbacks callbacks) {
  {
    std::lock_guard lock(mu_);
    if (accepting_) {
      queue_.push_back({std::move(job), std::move(callbacks)});
      cv_.notify_all();
      return;
    }
  }
  const std::string error = "the server is stopping";
  callbacks.done(&error);
}

void Batcher::drain() {
  std::unique_lock lock(mu_);
  accepting_ = false;
  idle_cv_.wait(lock, [this] { return queue_.empty() && !running_batch_; });
}

void Batcher::stop() {
  std::deque<Entry> dropped;
  {
    std::lock_guard lock(mu_);
    accepting_ = false;
    stopping_ = true;
    dropped.swap(queue_);
    cv_.notify_all();
  }
  idle_cv_.notify_all();  // a drain() waiting on the dropped jobs
  const std::string error = "the server is stopping";
  for (auto& e : dropped) e.callbacks.done(&error);
  if (thread_.joinable()) thread_.join();
}

Batcher::Stats Batcher::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void Batcher::run() {
  using clock = std::chrono::steady_clock;
  for (;;) {
    std::vector<Entry> batch;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      // Give the requests that arrive together a moment to join (unless the batch is full).
      auto rows_waiting = [this] {
        std::size_t rows = 0;
        for (const auto& e : queue_) rows += e.rows();
        return rows;
      };
      if (config_.batch_wait_ms > 0) {
        const auto deadline = clock::now() + std::chrono::duration_cast<clock::duration>(
                                                 std::chrono::duration<double, std::milli>(config_.batch_wait_ms));
        cv_.wait_until(lock, deadline, [&] { return stopping_ || rows_waiting() >= config_.max_batch; });
        if (stopping_) return;
      }
      // First come, first served: the oldest request always goes; the next ones while they fit.
      std::size_t rows = 0;
      while (!queue_.empty() && (batch.empty() || rows + queue_.front().rows() <= config_.max_batch)) {
        rows += queue_.front().rows();
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      running_batch_ = true;
      ++stats_.batches;
      stats_.jobs += static_cast<std::int64_t>(batch.size());
      stats_.largest_batch = std::max<std::int64_t>(stats_.largest_batch, static_cast<std::int64_t>(batch.size()));
    }
    run_batch(batch);
    {
      std::lock_guard lock(mu_);
      running_batch_ = false;
    }
    idle_cv_.notify_all();
  }
}

void Batcher::run_batch(std::vector<Entry>& batch) {
  const auto start = std::chrono::steady_clock::now();
  // Requests that draw from the same distribution share a generate call, in arrival order.
  using Key = std::tuple<std::string, double, double, std::int64_t, std::int64_t>;
  std::vector<Key> order;
  std::map<Key, std::vector<Entry*>> groups;
  std::size_t rows = 0;
  for (auto& e : batch) {
    const auto& j = e.job;
    Key key{j.adapter, j.temperature, j.top_p, j.top_k, j.n};
    if (groups.find(key) == groups.end()) order.push_back(key);
    groups[key].push_back(&e);
    rows += e.rows();
  }
  std::int64_t tokens = 0;
  std::vector<std::string> sizes;
  for (const auto& key : order) {
    auto& group = groups[key];
    sizes.push_back(std::to_string(group.size()));
    tokens += run_group(group);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (log_) {
    log_(fmt::format("batch of {} request{} ({} row{}) in {} group{} [{}]: {} tokens in {:.3f} s", batch.size(),
                     batch.size() == 1 ? "" : "s", rows, rows == 1 ? "" : "s", order.size(), order.size() == 1 ? "" : "s",
                     fmt::join(sizes, ", "), tokens, seconds));
  }
}

std::int64_t Batcher::run_group(std::vector<Entry*>& group) {
  const std::int64_t n = group.front()->job.n;
  std::vector<std::vector<std::int64_t>> prompts;
  std::vector<std::uint64_t> keys;
  std::vector<std::pair<std::size_t, std::size_t>> owner;  // prompt -> (entry in group, its prompt index)
  DrawParams params;
  params.temperature = group.front()->job.temperature;
  params.top_p = group.front()->job.top_p;
  params.top_k = group.front()->job.top_k;
  params.max_tokens = 1;
  std::vector<std::vector<RowText>> rows(group.size());
  std::vector<std::size_t> open(group.size(), 0);  // rows not finished yet, per entry
  for (std::size_t g = 0; g < group.size(); ++g) {
    const auto& job = group[g]->job;
    params.max_tokens = std::max(params.max_tokens, job.max_tokens);
    for (std::size_t p = 0; p < job.prompts.size(); ++p) {
      prompts.push_back(job.prompts[p]);
      keys.push_back(prompt_key(job.seed, p));
      owner.emplace_back(g, p);
      for (std::int64_t s = 0; s < n; ++s) rows[g].emplace_back(model_.tokenizer(), job.stop, job.max_tokens);
    }
    open[g] = rows[g].size();
  }
  std::vector<bool> done(group.size(), false);
  auto finish = [&](std::size_t g, const std::string* error) {
    if (done[g]) return;
    done[g] = true;
    group[g]->callbacks.done(error);
  };
  RowUpdate update;
  std::int64_t tokens = 0;
  try {
    model_.generate(group.front()->job.adapter, prompts, n, params, keys,
                    [&](std::size_t index, std::int64_t token, float logprob, bool finished, bool stop_token) {
                      const auto [g, p] = owner[index / static_cast<std::size_t>(n)];
                      const std::size_t row = p * static_cast<std::size_t>(n) + index % static_cast<std::size_t>(n);
                      RowText& text = rows[g][row];
                      if (text.finished() || done[g]) return false;
                      const auto& alive = group[g]->callbacks.alive;
                      if (alive && !alive()) {
                        const std::string gone = "the client went away";
                        finish(g, &gone);
                        return false;
                      }
                      ++tokens;
                      const bool ended = text.add(token, logprob, finished, stop_token, update);
                      update.row = row;
                      group[g]->callbacks.update(update);
                      if (ended && --open[g] == 0) finish(g, nullptr);
                      return !ended;
                    });
  } catch (const std::exception& e) {
    const std::string error = e.what();
    for (std::size_t g = 0; g < group.size(); ++g) finish(g, &error);
    return tokens;
  }
  // Every row ends at a stop token or at its own max_tokens, both seen above; this is for safety.
  for (std::size_t g = 0; g < group.size(); ++g) {
    if (done[g]) continue;
    const std::string error = "internal error: the sampler ended before every row finished";
    finish(g, &error);
  }
  return tokens;
}

}  // namespace kbrl::serve
