#include "batcher.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <optional>
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

namespace {

// What a group shares: the distribution drawn from.
using GroupKey = std::tuple<std::string, double, double, std::int64_t>;
GroupKey group_key(const SamplingJob& j) { return {j.adapter, j.temperature, j.top_p, j.top_k}; }

}  // namespace

void Batcher::run() {
  using clock = std::chrono::steady_clock;
  for (;;) {
    std::vector<Entry> batch;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      // Give the requests that arrive together a moment to join (unless the rows are there).
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
      // Everything waiting: the sampler admits rows as they free up, oldest first.
      while (!queue_.empty()) {
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
  // Requests that draw from the same distribution share a stream, in arrival order.
  std::vector<GroupKey> order;
  std::map<GroupKey, std::vector<Entry*>> groups;
  for (auto& e : batch) {
    const GroupKey key = group_key(e.job);
    if (groups.find(key) == groups.end()) order.push_back(key);
    groups[key].push_back(&e);
  }
  std::deque<Entry> joined;
  std::int64_t tokens = 0;
  std::size_t requests = 0, rows = 0;
  std::vector<std::string> sizes;
  for (const auto& key : order) {
    auto& group = groups[key];
    tokens += run_group(group, joined);
    sizes.push_back(std::to_string(group.size()));
    requests += group.size();
    for (const Entry* e : group) rows += e->rows();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (log_) {
    log_(fmt::format("batch of {} request{} ({} row{}) in {} group{} [{}]{}: {} tokens in {:.3f} s", requests,
                     requests == 1 ? "" : "s", rows, rows == 1 ? "" : "s", order.size(), order.size() == 1 ? "" : "s",
                     fmt::join(sizes, ", "),
                     joined.empty() ? std::string() : fmt::format(", {} joined while it ran", joined.size()), tokens,
                     seconds));
  }
}

Batcher::Entry* Batcher::take_joiner(const SamplingJob& like, std::int64_t max_tokens, std::size_t longest,
                                     std::deque<Entry>& joined) {
  std::lock_guard lock(mu_);
  if (stopping_ || queue_.empty() || model_.device_wanted()) return nullptr;
  const SamplingJob& job = queue_.front().job;
  if (group_key(job) != group_key(like) || job.max_tokens > max_tokens) return nullptr;
  for (const auto& p : job.prompts)
    if (p.size() > longest) return nullptr;
  joined.push_back(std::move(queue_.front()));
  queue_.pop_front();
  ++stats_.jobs;
  ++stats_.joined;
  return &joined.back();
}

std::int64_t Batcher::run_group(std::vector<Entry*>& group, std::deque<Entry>& joined) {
  const SamplingJob& first = group.front()->job;
  // The stream's own limit: the group's largest max_tokens, rounded up to a power of two (within
  // the context) so that requests asking for a little more can still join; each row stops at
  // its request's own limit.
  std::int64_t asked = 1;
  std::size_t longest = 1, rows_at_start = 0;
  for (const Entry* e : group) {
    asked = std::max(asked, e->job.max_tokens);
    for (const auto& p : e->job.prompts) longest = std::max(longest, p.size());
    rows_at_start += e->rows();
  }
  std::int64_t rounded = 1;
  while (rounded < asked) rounded *= 2;
  DrawParams params;
  params.temperature = first.temperature;
  params.top_p = first.top_p;
  params.top_k = first.top_k;
  params.max_tokens = std::max(asked, std::min(rounded, model_.context_length()));
  // The KV cache: room for the rows it starts with, twice over for those that join (more is
  // preempted and recomputed), at the most rows decoded together.
  const auto cache_rows = static_cast<std::int64_t>(std::min(config_.max_batch, 2 * rows_at_start));
  const std::int64_t expected = cache_rows * (static_cast<std::int64_t>(longest) + params.max_tokens + 32);

  struct JobRows {
    Entry* entry = nullptr;
    std::vector<RowText> rows;  // prompt * n + sample
    std::size_t open = 0;       // rows not finished yet
    bool done = false;
  };
  std::deque<JobRows> jobs;  // jobs[i] is group[i], once its first prompt is admitted
  std::vector<std::pair<JobRows*, std::size_t>> row_of;  // the sampler's row index -> (job, its row)
  JobRows* feeding = nullptr;
  std::size_t next_prompt = 0;
  const auto finish = [&](JobRows& j, const std::string* error) {
    if (j.done) return;
    j.done = true;
    j.entry->callbacks.done(error);
  };
  // Ends every job not finished yet (admitted or not) with `error`.
  const auto fail_unfinished = [&](const std::string& error) {
    for (std::size_t i = 0; i < group.size(); ++i) {
      if (i < jobs.size()) {
        finish(jobs[i], &error);
      } else {
        group[i]->callbacks.done(&error);
      }
    }
  };
  const auto next = [&]() -> std::optional<StreamRequest> {
    for (;;) {
      if (feeding != nullptr && next_prompt < feeding->entry->job.prompts.size()) {
        const SamplingJob& job = feeding->entry->job;
        const std::size_t p = next_prompt++;
        for (std::int64_t s = 0; s < job.n; ++s)
          row_of.emplace_back(feeding, p * static_cast<std::size_t>(job.n) + static_cast<std::size_t>(s));
        return StreamRequest{job.prompts[p], job.n, prompt_key(job.seed, p)};
      }
      if (jobs.size() == group.size()) {
        Entry* e = take_joiner(first, params.max_tokens, longest, joined);
        if (e == nullptr) return std::nullopt;
        group.push_back(e);
      }
      JobRows& j = jobs.emplace_back();
      j.entry = group[jobs.size() - 1];
      const SamplingJob& job = j.entry->job;
      for (std::size_t p = 0; p < job.prompts.size(); ++p)
        for (std::int64_t s = 0; s < job.n; ++s) j.rows.emplace_back(model_.tokenizer(), job.stop, job.max_tokens);
      j.open = j.rows.size();
      feeding = &j;
      next_prompt = 0;
    }
  };
  RowUpdate update;
  std::int64_t tokens = 0;
  try {
    model_.stream(first.adapter, params, static_cast<std::int64_t>(config_.max_batch), expected, next,
                  [&](std::size_t index, std::int64_t token, float logprob, bool finished, bool stop_token) {
                    auto [job, row] = row_of[index];
                    RowText& text = job->rows[row];
                    if (text.finished() || job->done) return false;
                    const auto& alive = job->entry->callbacks.alive;
                    if (alive && !alive()) {
                      const std::string gone = "the client went away";
                      finish(*job, &gone);
                      return false;
                    }
                    ++tokens;
                    const bool ended = text.add(token, logprob, finished, stop_token, update);
                    update.row = row;
                    job->entry->callbacks.update(update);
                    if (ended && --job->open == 0) finish(*job, nullptr);
                    return !ended;
                  });
  } catch (const std::exception& e) {
    fail_unfinished(e.what());
    return tokens;
  }
  // Every row ends at a stop token or at its own max_tokens, both seen above; this is for safety.
  fail_unfinished("internal error: the sampler ended before every row finished");
  return tokens;
}

}  // namespace kbrl::serve
