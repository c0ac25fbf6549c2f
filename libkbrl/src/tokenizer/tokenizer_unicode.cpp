// UTF-8 handling and NFC for the tokenizer. NFC follows UAX #15: full canonical decomposition,
// canonical ordering by combining class, then canonical composition; Hangul arithmetically.
#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "kbrl/tokenizer/tokenizer.hpp"
#include "tokenizer_unicode.hpp"

namespace kbrl::tokenizer::detail {
namespace {

// Bytes a sequence with this lead byte has (0: not a lead byte), and the range its second byte
// must lie in (Unicode's table of well-formed UTF-8 sequences).
struct Lead {
  std::uint8_t length, lo, hi;
};
Lead lead_of(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// How many bytes from s[i] on fit the sequence that s[i] leads (at most its length).
std::size_t fitting_bytes(std::string_view s, std::size_t i, const Lead& lead) {
  std::size_t n = 1;
  while (n < lead.length && i + n < s.size()) {
    const auto c = static_cast<unsigned char>(s[i + n]);
    const bool ok = n == 1 ? (c >= lead.lo && c <= lead.hi) : (c >= 0x80 && c <= 0xBF);
    if (!ok) break;
    ++n;
  }
  return n;
}

constexpr std::uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr std::uint32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr std::uint32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

std::uint8_t ccc_of(std::uint32_t cp) {
  if (cp < 0x300) return 0;
  const auto* end = kCccRanges + kCccRangeCount;
  const auto* it = std::upper_bound(kCccRanges, end, cp,
                                    [](std::uint32_t c, const CccRange& r) { return c < r.first; });
  if (it == kCccRanges) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

const Decomposition* decomposition_of(std::uint32_t cp) {
  const auto* end = kDecompositions + kDecompositionCount;
  const auto* it = std::lower_bound(kDecompositions, end, cp,
                                    [](const Decomposition& d, std::uint32_t c) { return d.cp < c; });
  return it != end && it->cp == cp ? it : nullptr;
}

std::uint32_t compose_pair(std::uint32_t a, std::uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto* end = kCompositions + kCompositionCount;
  const auto* it = std::lower_bound(kCompositions, end, std::pair{a, b}, [](const Composition& c, const auto& key) {
    return c.a != key.first ? c.a < key.first : c.b < key.second;
  });
  return it != end && it->a == a && it->b == b ? it->composite : 0;
}

void decompose(std::uint32_t cp, std::vector<std::uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const std::uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (const auto* d = decomposition_of(cp)) {
    decompose(d->a, out);
    if (d->b != 0) decompose(d->b, out);
    return;
  }
  out.push_back(cp);
}

// Code points that may make NFC differ from its input: a non-zero combining class, NFC_QC=No
// (they never survive NFC) or NFC_QC=Maybe (they may compose with what precedes them).
class QuickCheck {
 public:
  QuickCheck() : bits_((0x110000 + 63) / 64, 0) {
    for (std::size_t i = 0; i < kCccRangeCount; ++i)
      for (std::uint32_t cp = kCccRanges[i].first; cp <= kCccRanges[i].last; ++cp) set(cp);
    for (std::size_t i = 0; i < kDecompositionCount; ++i) {
      const auto& d = kDecompositions[i];
      if (d.b == 0 || compose_pair(d.a, d.b) != d.cp) set(d.cp);
    }
    for (std::size_t i = 0; i < kCompositionCount; ++i) set(kCompositions[i].b);
    for (std::uint32_t cp = kVBase; cp < kVBase + kVCount; ++cp) set(cp);
    for (std::uint32_t cp = kTBase + 1; cp < kTBase + kTCount; ++cp) set(cp);
  }
  bool test(std::uint32_t cp) const { return (bits_[cp >> 6] >> (cp & 63)) & 1U; }

 private:
  void set(std::uint32_t cp) { bits_[cp >> 6] |= std::uint64_t{1} << (cp & 63); }
  std::vector<std::uint64_t> bits_;
};

const QuickCheck& quick_check() {
  static const QuickCheck k;
  return k;
}

}  // namespace

std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
  const Lead lead = lead_of(static_cast<unsigned char>(s[i]));
  if (lead.length <= 1) return lead.length;
  return fitting_bytes(s, i, lead) == lead.length ? lead.length : 0;
}

std::size_t utf8_invalid_length(std::string_view s, std::size_t i) {
  const Lead lead = lead_of(static_cast<unsigned char>(s[i]));
  if (lead.length == 0) return 1;
  return fitting_bytes(s, i, lead);
}

std::uint32_t utf8_decode(std::string_view s, std::size_t i, std::size_t n) {
  const auto b = [&](std::size_t k) { return static_cast<std::uint32_t>(static_cast<unsigned char>(s[i + k])); };
  switch (n) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

void utf8_append(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::size_t utf8_incomplete_tail(std::string_view s) {
  // A character has at most 4 bytes, so its lead byte is among the last 3 if it is incomplete.
  for (std::size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const std::size_t i = s.size() - back;
    const Lead lead = lead_of(static_cast<unsigned char>(s[i]));
    if (lead.length == 0) continue;  // a continuation byte (or an invalid one): look further back
    // The lead of the last character: incomplete when every byte after it fits and some are missing.
    return lead.length > back && fitting_bytes(s, i, lead) == back ? back : 0;
  }
  return 0;
}

bool nfc_may_change(std::string_view s) {
  const QuickCheck& qc = quick_check();
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0xCC) {  // below U+0300 nothing composes, decomposes or has a combining class
      i += b < 0x80 ? 1 : 2;
      continue;
    }
    const std::size_t n = utf8_sequence_length(s, i);
    if (qc.test(utf8_decode(s, i, n))) return true;
    i += n;
  }
  return false;
}

std::string nfc_valid(std::string_view s) {
  std::vector<std::uint32_t> cps;
  cps.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence_length(s, i);
    decompose(utf8_decode(s, i, n), cps);
    i += n;
  }
  // Canonical ordering: a stable sort of each run of non-starters by combining class.
  for (std::size_t i = 0; i < cps.size();) {
    if (ccc_of(cps[i]) == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < cps.size() && ccc_of(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + static_cast<std::ptrdiff_t>(i), cps.begin() + static_cast<std::ptrdiff_t>(j),
                     [](std::uint32_t a, std::uint32_t b) { return ccc_of(a) < ccc_of(b); });
    i = j;
  }
  // Canonical composition: each character joins the last starter unless a character between
  // them has a combining class at least its own (or is a starter).
  if (!cps.empty()) {
    std::size_t starter = 0, out = 1;
    int last_class = ccc_of(cps[0]) == 0 ? 0 : 256;
    for (std::size_t i = 1; i < cps.size(); ++i) {
      const std::uint32_t cp = cps[i];
      const int cls = ccc_of(cp);
      if ((last_class < cls || last_class == 0)) {
        if (const std::uint32_t composite = compose_pair(cps[starter], cp); composite != 0) {
          cps[starter] = composite;
          continue;
        }
      }
      if (cls == 0) starter = out;
      last_class = cls;
      cps[out++] = cp;
    }
    cps.resize(out);
  }
  std::string result;
  result.reserve(s.size());
  for (std::uint32_t cp : cps) utf8_append(result, cp);
  return result;
}

bool is_white_space(std::uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

}  // namespace kbrl::tokenizer::detail

namespace kbrl::tokenizer {

bool utf8_valid(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = detail::utf8_sequence_length(text, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string utf8_lossy(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = detail::utf8_sequence_length(text, i);
    if (n != 0) {
      out.append(text.substr(i, n));
      i += n;
    } else {
      out.append("\xEF\xBF\xBD");
      i += detail::utf8_invalid_length(text, i);
    }
  }
  return out;
}

std::string nfc(std::string_view text) {
  std::string valid;
  if (!utf8_valid(text)) {
    valid = utf8_lossy(text);
    text = valid;
  }
  return detail::nfc_may_change(text) ? detail::nfc_valid(text) : std::string(text);
}

std::string_view nfc_unicode_version() { return detail::kNfcUnicodeVersion; }

}  // namespace kbrl::tokenizer
