#include "kbrl/prompt/answer_parser.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "kbrl/core/python_lexer.hpp"
#include "text_util.hpp"

namespace kbrl::prompt {
namespace {

constexpr std::size_t npos = std::string_view::npos;
constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kKernelOpen = "<kernel>";
constexpr std::string_view kKernelClose = "</kernel>";

bool is_blank(char c) { return c == ' ' || c == '\t'; }

std::size_t skip_blanks(std::string_view s, std::size_t i) {
  while (i < s.size() && is_blank(s[i])) ++i;
  return i;
}

std::size_t line_end(std::string_view s, std::size_t i) {
  const std::size_t e = s.find('\n', i);
  return e == npos ? s.size() : e;
}

std::size_t count_ticks(std::string_view s, std::size_t i) {
  std::size_t n = 0;
  while (i + n < s.size() && s[i + n] == '`') ++n;
  return n;
}

struct FenceOpen {
  std::size_t at = 0;             // where the fence line (or the text after a tag) begins
  std::size_t ticks = 0;
  std::string_view info;          // the rest of the opening line
  std::size_t content_begin = 0;  // first character of the next line
};

// A fence opening at `p`, which is a line start or the end of a tag.
std::optional<FenceOpen> fence_open_at(std::string_view s, std::size_t p) {
  const std::size_t i = skip_blanks(s, p);
  const std::size_t ticks = count_ticks(s, i);
  if (ticks < 3) return std::nullopt;
  const std::size_t end = line_end(s, i + ticks);
  const std::string_view info = s.substr(i + ticks, end - i - ticks);
  // A backtick in the info string makes it inline code (```x```), not a fence; a closing tag
  // right after the backticks is a fence that closes a block, never one that opens.
  if (info.find('`') != npos || detail::starts_with_ci(detail::python_lstrip(info), kKernelClose))
    return std::nullopt;
  return FenceOpen{p, ticks, info, end < s.size() ? end + 1 : s.size()};
}

struct FenceClose {
  std::size_t line_start = 0;
  std::size_t ticks = 0;
  std::size_t next = 0;      // where scanning resumes: the next line, or the closing tag
  bool tag_follows = false;  // "```</KERNEL>"
};

struct Fence {
  std::string lang;
  std::string_view content;
  bool defines_model_new = false;
};

struct Block {
  std::vector<Fence> fences;
  std::string_view raw;
  bool closed = false;
};

// Scanning state: lookups of the next tag or fence at or after a position only move forward, so
// each is cached until the scan passes it. That keeps degenerate completions (thousands of
// repeated tags) linear.
class Scanner {
 public:
  explicit Scanner(std::string_view s) : s_(s) {
    for (std::size_t p = 0; p < s.size(); p = line_end(s, p) + 1) {
      const std::size_t i = skip_blanks(s, p);
      const std::size_t ticks = count_ticks(s, i);
      if (ticks >= 3) {
        std::size_t j = i + ticks;
        while (j < s.size() && (is_blank(s[j]) || s[j] == '\r')) ++j;
        if (j == s.size() || s[j] == '\n') {
          closers_.push_back({p, ticks, j == s.size() ? j : j + 1, false});
        } else if (detail::starts_with_ci(s.substr(j), kKernelClose)) {
          closers_.push_back({p, ticks, j, true});
        }
      }
      if (line_end(s, p) == s.size()) break;
    }
  }

  struct TagCache {
    bool searched = false;
    std::size_t at = npos;
  };
  std::size_t next_tag(std::string_view tag, TagCache& cache, std::size_t pos) const {
    if (!cache.searched || (cache.at != npos && cache.at < pos)) {
      cache.at = detail::find_ci(s_, tag, pos);
      cache.searched = true;
    }
    return cache.at;
  }
  std::size_t next_think(std::size_t pos) { return next_tag(kThinkOpen, think_, pos); }
  std::size_t next_open(std::size_t pos) { return next_tag(kKernelOpen, open_, pos); }
  std::size_t next_close(std::size_t pos) { return next_tag(kKernelClose, close_, pos); }

  // The next fence that opens at a line start at or after `pos`.
  std::optional<FenceOpen> next_line_fence(std::size_t pos) {
    if (fence_done_) return std::nullopt;
    if (fence_ && fence_->at >= pos) return fence_;
    std::size_t p = pos;
    if (p > 0 && s_[p - 1] != '\n') {
      p = line_end(s_, p);
      if (p == s_.size()) return none();
      ++p;
    }
    while (p < s_.size()) {
      if (auto f = fence_open_at(s_, p)) return fence_ = f;
      p = line_end(s_, p);
      if (p == s_.size()) break;
      ++p;
    }
    return none();
  }

  std::optional<FenceClose> closing_fence(std::size_t from, std::size_t ticks) const {
    auto it = std::lower_bound(closers_.begin(), closers_.end(), from,
                               [](const FenceClose& c, std::size_t p) { return c.line_start < p; });
    for (; it != closers_.end(); ++it)
      if (it->ticks >= ticks) return *it;
    return std::nullopt;
  }

 private:
  std::optional<FenceOpen> none() {
    fence_done_ = true;
    return std::nullopt;
  }

  std::string_view s_;
  std::vector<FenceClose> closers_;
  TagCache think_, open_, close_;
  std::optional<FenceOpen> fence_;
  bool fence_done_ = false;
};

std::string fence_language(std::string_view info) {
  info = detail::python_strip(info);
  std::size_t end = 0;
  while (end < info.size() && !is_blank(info[end])) ++end;
  return detail::ascii_lower(info.substr(0, end));
}

bool python_like(std::string_view lang) {
  return lang.empty() || lang == "python" || lang == "py" || lang == "python3";
}

// An unclosed fence's code may end with the backticks that should have closed it on their own line.
std::string_view drop_dangling_ticks(std::string_view code) {
  const std::string_view trimmed = detail::python_rstrip(code);
  std::size_t n = 0;
  while (n < trimmed.size() && trimmed[trimmed.size() - 1 - n] == '`') ++n;
  if (n < 3) return code;
  return detail::rstrip_chars(trimmed.substr(0, trimmed.size() - n), " \t");
}

// The block's text without its blank first and last lines.
std::string_view trim_raw(std::string_view raw) {
  std::size_t begin = 0;
  while (begin < raw.size()) {
    const std::size_t end = line_end(raw, begin);
    if (!detail::python_strip(raw.substr(begin, end - begin)).empty()) break;
    begin = end == raw.size() ? end : end + 1;
  }
  return detail::python_rstrip(raw.substr(begin));
}

struct Candidate {
  std::string code;
  bool defines_model_new = false;
};

std::optional<Candidate> candidate_of(const std::vector<Fence>& fences, std::optional<std::string_view> raw) {
  const Fence* pick = nullptr;
  for (auto it = fences.rbegin(); it != fences.rend() && pick == nullptr; ++it)
    if (python_like(it->lang) && it->defines_model_new) pick = &*it;
  for (auto it = fences.rbegin(); it != fences.rend() && pick == nullptr; ++it)
    if (it->defines_model_new) pick = &*it;
  for (auto it = fences.begin(); it != fences.end() && pick == nullptr; ++it)
    if (python_like(it->lang)) pick = &*it;
  if (pick == nullptr && !fences.empty()) pick = &fences.front();
  if (pick != nullptr) return Candidate{std::string(pick->content), pick->defines_model_new};
  if (raw) {
    const std::string_view code = trim_raw(*raw);
    if (code.empty()) return std::nullopt;
    // format_ok is decided on the kernel as returned, newline included: without it a last line
    // ending in a backslash would read differently (found by fuzzing).
    std::string kernel = std::string(code) + "\n";
    const bool defines = defines_top_level_class(kernel, "ModelNew");
    return Candidate{std::move(kernel), defines};
  }
  return std::nullopt;
}

}  // namespace

bool defines_top_level_class(std::string_view source, std::string_view class_name) {
  const auto tokens = core::lex_python(source);
  auto next_code = [&](std::size_t i) {
    while (i < tokens.size() && tokens[i].kind == core::PyTokenKind::comment) ++i;
    return i;
  };
  bool line_start = true;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto& t = tokens[i];
    if (t.kind == core::PyTokenKind::comment) continue;
    if (t.kind == core::PyTokenKind::newline) {
      line_start = true;
      continue;
    }
    const bool first_on_line = line_start;
    line_start = false;
    if (!first_on_line || t.indent != 0 || !t.is_name("class")) continue;
    const std::size_t j = next_code(i + 1);
    if (j >= tokens.size() || !tokens[j].is_name(class_name)) continue;
    std::size_t k = next_code(j + 1);
    if (k < tokens.size() && tokens[k].is_op("(")) {
      int depth = 0;
      for (; k < tokens.size(); ++k) {
        if (tokens[k].is_op("(")) ++depth;
        if (tokens[k].is_op(")") && --depth == 0) break;
      }
      k = next_code(k + 1);
      if (k < tokens.size() && tokens[k].is_op(":")) return true;
    } else if (k < tokens.size() && tokens[k].is_op(":")) {
      // `class Name:` must end its logical line; this keeps C++ `class Name : public Base` out.
      const std::size_t m = next_code(k + 1);
      if (m >= tokens.size() || tokens[m].kind == core::PyTokenKind::newline) return true;
    }
  }
  return false;
}

core::Completion parse_completion(std::string_view text) { return parse_completion(text, ParseOptions{}); }

core::Completion parse_completion(std::string_view text, const ParseOptions& options) {
  core::Completion out;
  out.text = std::string(text);
  const std::size_t n = text.size();
  Scanner scan(text);

  std::optional<std::string_view> thinking;
  bool thinking_closed = false;
  auto note_thinking = [&](std::string_view content, bool closed) {
    if (thinking) return;
    thinking = content;
    thinking_closed = closed;
  };

  std::size_t pos = 0;
  bool after_tag = false;  // a fence may start right here, after a tag on the same line
  {
    const std::size_t first_close = detail::find_ci(text, kThinkClose);
    const std::size_t first_open = detail::find_ci(text, kThinkOpen);
    if (first_close != npos && (options.starts_in_thinking || first_open == npos || first_close < first_open)) {
      note_thinking(text.substr(0, first_close), true);  // the prompt opened the block
      pos = first_close + kThinkClose.size();
      after_tag = true;
    } else if (options.starts_in_thinking) {
      note_thinking(text, false);  // reasoning that never finished: there is no answer
      pos = n;
    }
  }

  std::vector<Fence> top_fences;
  std::vector<Block> blocks;
  std::optional<Block> block;
  std::size_t block_begin = 0;
  auto end_block = [&](std::size_t end, bool closed) {
    block->raw = text.substr(block_begin, end - block_begin);
    block->closed = closed;
    blocks.push_back(std::move(*block));
    block.reset();
  };

  while (pos < n) {
    std::optional<FenceOpen> fence = after_tag ? fence_open_at(text, pos) : std::nullopt;
    if (!fence) fence = scan.next_line_fence(pos);
    const std::size_t at_fence = fence ? fence->at : npos;
    const std::size_t at_think = scan.next_think(pos);
    const std::size_t at_open = scan.next_open(pos);
    const std::size_t at_close = block ? scan.next_close(pos) : npos;
    const std::size_t at = std::min({at_fence, at_think, at_open, at_close});
    if (at == npos) break;
    after_tag = false;

    if (at == at_fence) {
      Fence f{fence_language(fence->info), {}, false};
      const std::size_t begin = fence->content_begin;
      if (const auto close = scan.closing_fence(begin, fence->ticks)) {
        f.content = text.substr(begin, close->line_start - begin);
        pos = close->next;
      } else {
        // Unclosed: the model forgot the closing fence, or ran out of tokens.
        const std::size_t bound = block ? scan.next_close(begin) : npos;
        const std::size_t end = bound == npos ? n : bound;
        f.content = drop_dangling_ticks(text.substr(begin, end - begin));
        pos = end;
      }
      f.defines_model_new = defines_top_level_class(f.content, "ModelNew");
      (block ? block->fences : top_fences).push_back(std::move(f));
    } else if (at == at_think) {
      const std::size_t begin = at + kThinkOpen.size();
      const std::size_t end = detail::find_ci(text, kThinkClose, begin);
      if (end == npos) {
        note_thinking(text.substr(begin), false);
        pos = n;
      } else {
        note_thinking(text.substr(begin, end - begin), true);
        pos = end + kThinkClose.size();
        after_tag = true;
      }
    } else if (at == at_open) {
      if (block) end_block(at, false);  // a new opening tag abandons the open block
      block.emplace();
      block_begin = at + kKernelOpen.size();
      pos = block_begin;
      after_tag = true;
    } else {
      end_block(at, true);
      pos = at + kKernelClose.size();
      after_tag = true;
    }
  }
  if (block) end_block(n, false);

  if (thinking) {
    out.thinking = std::string(detail::python_strip(*thinking));
    out.has_thinking = thinking_closed;
  }

  std::optional<Candidate> candidate;
  if (!blocks.empty()) {
    const Block* chosen = &blocks.back();
    for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
      auto c = candidate_of(it->fences, it->raw);
      if (c && c->defines_model_new) {
        chosen = &*it;
        candidate = std::move(c);
        break;
      }
    }
    if (!candidate) candidate = candidate_of(chosen->fences, chosen->raw);
    out.has_kernel_block = chosen->closed;
  } else {
    candidate = candidate_of(top_fences, std::nullopt);
  }
  if (candidate) {
    out.kernel = std::move(candidate->code);
    out.format_ok = candidate->defines_model_new;
  }
  return out;
}

}  // namespace kbrl::prompt
