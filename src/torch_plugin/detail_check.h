#pragma once

// The checks of TDIST_DEBUG=DETAIL for tdist groups (under torch's own
// TORCH_DISTRIBUTED_DEBUG=DETAIL torch wraps the backend in its checking
// wrapper instead). The plugin checks its own calls: before each
// collective every rank describes its call (the op, the root, and for every
// tensor argument, each entry of a list included, the dtype, device, layout
// and shape), the ranks exchange the descriptions, and if they disagree
// every rank raises the same report of who passed what. tdist's own call
// matching compares element counts, so a [2, 5] against a [5, 2] tensor, or
// two lists whose entries differ in shape but not in total size, pass it;
// they do not pass this.
//
// This file holds the descriptions, their encoding as int64 words (what the
// ranks exchange) and the comparison; process_group_tdist.cc exchanges them.
// Header-only: see work_tdist.h.

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "conversions.h"

namespace tdist::torch_plugin::detail_check {

/// What must agree across ranks for one argument.
enum class Rule : int64_t {
  kSame = 0,           // alike on every rank
  kSameButFirst = 1,   // alike but for the first dimension (all_to_all_single with split sizes)
  kEntryOf = 2,        // one tensor; on rank r alike entry r of list `other` (rank r's, or the root's)
  kTransposeOf = 3,    // entry j on rank i alike entry i of list `other` on rank j (all_to_all)
  kFromOtherSide = 4,  // compared by another argument's rule (a root's list)
};

/// One tensor as the check sees it.
struct Spec {
  int64_t dtype = -1;  // at::ScalarType; -1 for an undefined tensor
  int64_t device_type = 0;
  int64_t device_index = -1;
  int64_t layout = 0;
  std::vector<int64_t> shape;
  bool operator==(const Spec&) const = default;
};

struct Arg {
  std::string name;
  bool list = true;  // a list argument (printed in brackets) rather than one tensor
  Rule rule = Rule::kSame;
  int64_t other = -1;    // the related argument's index (kEntryOf, kTransposeOf)
  bool of_root = false;  // kEntryOf: the root's list rather than the rank's own
  std::vector<Spec> specs;
};

struct Call {
  std::string op;
  int64_t root = -1;
  std::vector<Arg> args;
};

inline Spec spec_of(const at::Tensor& t) {
  Spec s;
  if (!t.defined()) return s;
  s.dtype = static_cast<int64_t>(t.scalar_type());
  s.device_type = static_cast<int64_t>(t.device().type());
  // A c10::DeviceIndex is a number in a signed char (-1: no index).
  s.device_index = t.device().index();  // NOLINT(bugprone-signed-char-misuse)
  s.layout = static_cast<int64_t>(t.layout());
  s.shape.assign(t.sizes().begin(), t.sizes().end());
  return s;
}

/// A list argument.
inline Arg list(std::string name, const std::vector<at::Tensor>& tensors, Rule rule = Rule::kSame,
                int64_t other = -1) {
  Arg a{std::move(name), true, rule, other, false, {}};
  for (const auto& t : tensors) a.specs.push_back(spec_of(t));
  return a;
}

/// A one-tensor argument.
inline Arg one(std::string name, const at::Tensor& tensor, Rule rule = Rule::kSame, int64_t other = -1,
               bool of_root = false) {
  return Arg{std::move(name), false, rule, other, of_root, {spec_of(tensor)}};
}

// ---- Encoding: what the ranks exchange ----

inline void put_string(std::vector<int64_t>& words, const std::string& s) {
  words.push_back(static_cast<int64_t>(s.size()));
  for (size_t i = 0; i < s.size(); i += 8) {
    uint64_t w = 0;
    for (size_t k = 0; k < 8 && i + k < s.size(); ++k)
      w |= static_cast<uint64_t>(static_cast<uint8_t>(s[i + k])) << (8 * k);
    words.push_back(static_cast<int64_t>(w));
  }
}

inline std::vector<int64_t> encode(const Call& call) {
  std::vector<int64_t> w;
  put_string(w, call.op);
  w.push_back(call.root);
  w.push_back(static_cast<int64_t>(call.args.size()));
  for (const auto& a : call.args) {
    put_string(w, a.name);
    w.insert(w.end(), {a.list ? 1 : 0, static_cast<int64_t>(a.rule), a.other, a.of_root ? 1 : 0,
                       static_cast<int64_t>(a.specs.size())});
    for (const auto& s : a.specs) {
      w.insert(w.end(),
               {s.dtype, s.device_type, s.device_index, s.layout, static_cast<int64_t>(s.shape.size())});
      w.insert(w.end(), s.shape.begin(), s.shape.end());
    }
  }
  return w;
}

/// Reads what encode() wrote; raises std::runtime_error on words it did not.
class Decoder {
 public:
  Decoder(const int64_t* words, int64_t n) : p_(words), end_(words + n) {}

  Call call() {
    Call c;
    c.op = string();
    c.root = next();
    for (int64_t i = 0, n = count(); i < n; ++i) {
      Arg a;
      a.name = string();
      a.list = next() != 0;
      a.rule = static_cast<Rule>(next());
      a.other = next();
      a.of_root = next() != 0;
      for (int64_t k = 0, m = count(); k < m; ++k) {
        Spec s{next(), next(), next(), next(), {}};
        for (int64_t d = 0, nd = count(); d < nd; ++d) s.shape.push_back(next());
        a.specs.push_back(std::move(s));
      }
      c.args.push_back(std::move(a));
    }
    if (p_ != end_) throw std::runtime_error("trailing words");
    return c;
  }

 private:
  int64_t next() {
    if (p_ == end_) throw std::runtime_error("truncated");
    return *p_++;
  }
  int64_t count() {
    int64_t n = next();
    if (n < 0 || n > end_ - p_) throw std::runtime_error("bad count");
    return n;
  }
  std::string string() {
    int64_t n = next();
    if (n < 0 || (n + 7) / 8 > end_ - p_) throw std::runtime_error("bad string length");
    std::string s;
    for (int64_t i = 0; i < n; ++i) {
      if (i % 8 == 0) next();
      s.push_back(static_cast<char>((static_cast<uint64_t>(p_[-1]) >> (8 * (i % 8))) & 0xff));
    }
    return s;
  }
  const int64_t* p_;
  const int64_t* end_;
};

/// FNV-1a over the words: ranks whose hashes and lengths agree skip the
/// exchange of the descriptions themselves.
inline int64_t hash(const std::vector<int64_t>& words) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t w : words) {
    for (int k = 0; k < 8; ++k) {
      h ^= (static_cast<uint64_t>(w) >> (8 * k)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return static_cast<int64_t>(h);
}

// ---- Descriptions for the report ----

inline std::string label(const Spec& s) {
  if (s.dtype < 0) return "undefined";
  std::string out = s.dtype < static_cast<int64_t>(at::ScalarType::NumOptions)
                        ? dtype_label(static_cast<at::ScalarType>(s.dtype))
                        : "dtype " + std::to_string(s.dtype);
  out += "[";
  for (size_t i = 0; i < s.shape.size(); ++i) out += (i ? ", " : "") + std::to_string(s.shape[i]);
  out += "]";
  auto layout = static_cast<c10::Layout>(s.layout);
  if (layout != c10::kStrided) out += " " + c10::str(layout);
  auto device = static_cast<c10::DeviceType>(s.device_type);
  if (device != c10::DeviceType::CPU) {
    out += " on " + c10::DeviceTypeName(device, /*lower_case=*/true);
    if (s.device_index >= 0) out += ":" + std::to_string(s.device_index);
  }
  return out;
}

inline std::string label(const std::vector<Spec>& specs) {
  std::string out = "[";
  for (size_t i = 0; i < specs.size();) {
    size_t j = i;
    while (j < specs.size() && specs[j] == specs[i]) ++j;
    out += (i ? ", " : "") + label(specs[i]) + (j - i > 1 ? " x" + std::to_string(j - i) : "");
    i = j;
  }
  return out + "]";
}

inline std::string describe(const Call& c) {
  std::string out = c.op + "(";
  for (size_t i = 0; i < c.args.size(); ++i) {
    const auto& a = c.args[i];
    out += (i ? ", " : "") + a.name + "=" +
           (!a.list && a.specs.size() == 1 ? label(a.specs[0]) : label(a.specs));
  }
  if (c.root >= 0) out += std::string(c.args.empty() ? "" : ", ") + "root=" + std::to_string(c.root);
  return out + ")";
}

// ---- The comparison ----

using RankName = std::function<std::string(int)>;

inline Spec without_first(Spec s) {
  if (!s.shape.empty()) s.shape.erase(s.shape.begin());
  return s;
}

inline bool same_structure(const Call& a, const Call& b) {
  if (a.op != b.op || a.root != b.root || a.args.size() != b.args.size()) return false;
  for (size_t i = 0; i < a.args.size(); ++i) {
    const auto &x = a.args[i], &y = b.args[i];
    if (x.name != y.name || x.list != y.list || x.rule != y.rule || x.other != y.other ||
        x.of_root != y.of_root)
      return false;
  }
  return true;
}

inline bool args_alike(const Arg& x, const Arg& y) {
  if (x.specs.size() != y.specs.size()) return false;
  for (size_t i = 0; i < x.specs.size(); ++i) {
    if (x.rule == Rule::kSameButFirst ? without_first(x.specs[i]) != without_first(y.specs[i])
                                      : x.specs[i] != y.specs[i])
      return false;
  }
  return true;
}

/// The first disagreement among `calls` (one per rank), seen from rank
/// `me`, or empty if they agree.
inline std::string first_disagreement(const std::vector<Call>& calls, int me, const RankName& name) {
  const int n = static_cast<int>(calls.size());
  auto versus = [&](int r) {
    return "Rank " + name(me) + " is running collective: " + describe(calls[me]) + ", but Rank " + name(r) +
           " is running collective: " + describe(calls[r]);
  };
  for (int r = 0; r < n; ++r) {
    if (!same_structure(calls[me], calls[r])) return versus(r);
  }
  const Call& mine = calls[me];
  for (size_t a = 0; a < mine.args.size(); ++a) {
    const Arg& arg_me = mine.args[a];
    if (arg_me.rule == Rule::kSame || arg_me.rule == Rule::kSameButFirst) {
      for (int r = 0; r < n; ++r) {
        if (!args_alike(arg_me, calls[r].args[a])) {
          return versus(r) + " (" + arg_me.name + " differs" +
                 (arg_me.rule == Rule::kSameButFirst ? " beyond its first dimension)" : ")");
        }
      }
    }
    if (arg_me.other < 0 || static_cast<size_t>(arg_me.other) >= mine.args.size()) continue;
    const auto other = static_cast<size_t>(arg_me.other);
    if (arg_me.rule == Rule::kEntryOf) {
      for (int r = 0; r < n; ++r) {
        int owner = arg_me.of_root ? static_cast<int>(mine.root) : r;
        if (owner < 0 || owner >= n) continue;
        const auto& mine_r = calls[r].args[a].specs;
        const auto& list = calls[owner].args[other].specs;
        if (mine_r.size() != 1 || list.size() != static_cast<size_t>(n)) continue;  // checked locally
        if (mine_r[0] != list[static_cast<size_t>(r)]) {
          return arg_me.name + " of rank " + name(r) + " is " + label(mine_r[0]) + " but " +
                 mine.args[other].name + "[" + std::to_string(r) + "] of rank " + name(owner) + " is " +
                 label(list[static_cast<size_t>(r)]);
        }
      }
    } else if (arg_me.rule == Rule::kTransposeOf) {
      for (int i = 0; i < n; ++i) {
        for (int j = 0; j < n; ++j) {
          const auto& out_i = calls[i].args[a].specs;
          const auto& in_j = calls[j].args[other].specs;
          if (out_i.size() != static_cast<size_t>(n) || in_j.size() != static_cast<size_t>(n)) continue;
          if (out_i[static_cast<size_t>(j)] != in_j[static_cast<size_t>(i)]) {
            return arg_me.name + "[" + std::to_string(j) + "] of rank " + name(i) + " is " +
                   label(out_i[static_cast<size_t>(j)]) + " but " + mine.args[other].name + "[" +
                   std::to_string(i) + "] of rank " + name(j) + " is " + label(in_j[static_cast<size_t>(i)]);
          }
        }
      }
    }
  }
  return {};
}

/// The error every rank raises when `calls` disagree, or empty.
inline std::string mismatch_report(const std::vector<Call>& calls, int me, const RankName& name) {
  std::string why = first_disagreement(calls, me, name);
  if (why.empty()) return why;
  std::string out =
      calls[static_cast<size_t>(me)].op +
      ": Detected mismatch between collectives on ranks (a check of TDIST_DEBUG=DETAIL): " + why +
      ". Each rank's call:";
  // Ranks that passed alike share a line.
  std::vector<bool> done(calls.size(), false);
  for (size_t r = 0; r < calls.size(); ++r) {
    if (done[r]) continue;
    std::string ranks;
    std::string text = describe(calls[r]);
    int count = 0;
    for (size_t k = r; k < calls.size(); ++k) {
      if (!done[k] && describe(calls[k]) == text) {
        done[k] = true;
        ranks += (count++ ? ", " : "") + name(static_cast<int>(k));
      }
    }
    out += "\n  rank" + std::string(count > 1 ? "s " : " ") + ranks + ": " + text;
  }
  return out;
}

}  // namespace tdist::torch_plugin::detail_check
