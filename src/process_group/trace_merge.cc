// Reading the flight recorders of a whole job (flight_recorder.h): pure
// functions of the ranks' dumps (tdist/trace.h).

#include "tdist/trace.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

#include "tdist/errors.h"

namespace tdist {
namespace {

using nlohmann::json;

// One rank's view of one group: its collectives by sequence number.
struct RankView {
  int global_rank = -1;
  const json* dump = nullptr;
  const json* group = nullptr;
  std::map<int64_t, const json*> calls;  // seq -> entry
  int64_t offset_ns = 0;
};

// A group as every rank that dumped saw it, keyed by its members and how
// many groups of the same members the process had created before it.
struct GroupView {
  std::vector<int> members;  // global ranks, in group-rank order
  std::string transport;
  std::map<int, RankView> ranks;  // global rank -> its view
};

std::vector<json> parse_all(const std::vector<std::string>& dumps, const std::vector<std::string>& names) {
  std::vector<json> out;
  for (size_t i = 0; i < dumps.size(); ++i) {
    const std::string name = i < names.size() ? names[i] : "dump " + std::to_string(i);
    try {
      json doc = json::parse(dumps[i]);
      if (!doc.contains("entries") || !doc.contains("groups"))
        throw DistInvalidArgument("no \"entries\" or \"groups\"");
      out.push_back(std::move(doc));
    } catch (const std::exception& e) {
      throw DistInvalidArgument(name + " is not a tdist flight recorder dump: " + e.what());
    }
  }
  return out;
}

std::string join(const std::vector<int>& values, const char* sep = ", ") {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) out += (i ? sep : "") + std::to_string(values[i]);
  return out;
}

// "rank 2" / "ranks 0, 1, 3".
std::string ranks_text(const std::vector<int>& ranks) {
  return (ranks.size() > 1 ? "ranks " : "rank ") + join(ranks);
}

std::vector<GroupView> group_views(const std::vector<json>& docs) {
  std::map<std::string, GroupView> by_key;
  std::vector<std::string> order;
  for (const auto& doc : docs) {
    std::map<std::string, int> seen;  // members -> groups of them so far in this process
    for (const auto& g : doc["groups"]) {
      const auto members = g["global_ranks"].get<std::vector<int>>();
      const std::string ranks = join(members, ",");
      const std::string key = ranks + "#" + std::to_string(seen[ranks]++);
      if (!by_key.count(key)) order.push_back(key);
      GroupView& view = by_key[key];
      view.members = members;
      view.transport = g.value("transport", "");
      const int me = members.at(g["rank"].get<size_t>());
      RankView& rv = view.ranks[me];
      rv.global_rank = me;
      rv.dump = &doc;
      rv.group = &g;
      rv.offset_ns = g.value("clock_offset_ns", int64_t{0});
      const auto id = g["id"].get<int64_t>();
      for (const auto& e : doc["entries"]) {
        if (e["group"].get<int64_t>() == id && e.contains("seq")) rv.calls[e["seq"].get<int64_t>()] = &e;
      }
    }
  }
  std::vector<GroupView> out;
  out.reserve(order.size());
  for (const auto& key : order) out.push_back(std::move(by_key[key]));
  return out;
}

// "all_reduce float32 x 10 root 1 SUM": what a rank passed to a call.
std::string describe(const json& e) {
  std::string out = e.value("op", "?");
  if (e.contains("dtype")) out += " " + e["dtype"].get<std::string>();
  if (e.contains("count")) out += " x " + std::to_string(e["count"].get<uint64_t>());
  if (e.contains("root")) out += " root " + std::to_string(e["root"].get<int>());
  if (e.contains("reduce_op")) out += " " + e["reduce_op"].get<std::string>();
  return out;
}

std::string ms(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f ms", static_cast<double>(ns) / 1e6);
  return buf;
}

// The highest call a rank began: from its dump, else from what a peer saw
// of it (its shared-memory records, or its messages over TCP).
std::optional<std::pair<int64_t, std::string>> last_begun(const GroupView& g, int rank) {
  auto it = g.ranks.find(rank);
  if (it != g.ranks.end() && !it->second.calls.empty()) {
    const auto& [seq, e] = *it->second.calls.rbegin();
    return std::make_pair(seq, describe(*e) + " (" + e->value("state", "?") + ")");
  }
  std::optional<std::pair<int64_t, std::string>> best;
  // Peers key what they read by group rank: the rank's place in members.
  const std::string member_index =
      std::to_string(std::find(g.members.begin(), g.members.end(), rank) - g.members.begin());
  for (const auto& [peer, view] : g.ranks) {
    const json& peers = view.group->value("peers_last_call", json::object());
    if (!peers.contains(member_index)) continue;
    const json& p = peers[member_index];
    const auto seq = p["seq"].get<int64_t>();
    if (!best || seq > best->first) {
      const bool shm = g.transport == "shared memory";
      best = std::make_pair(
          seq, describe(p) + (shm ? " (its newest call record, read by rank " + std::to_string(peer) +
                                        " from shared memory)"
                                  : " (its newest message that reached rank " + std::to_string(peer) + ")"));
    }
  }
  return best;
}

// The members that a failed call's error says died, by the transports'
// words for a connection that closed without a goodbye ("rank 2
// (127.0.0.1:41163) closed the connection; the peer process probably
// died", "rank 2 died or closed its connection"), as global ranks.
std::set<int> named_dead(const GroupView& g, const json& e) {
  static const std::regex dead(
      R"(rank (\d+) \([^)]*\) [^;]*; the peer process probably died|rank (\d+) died or closed its connection)");
  std::set<int> out;
  const std::string error = e.value("error", "");
  for (auto it = std::sregex_iterator(error.begin(), error.end(), dead); it != std::sregex_iterator(); ++it) {
    const std::string r = (*it)[1].matched ? (*it)[1].str() : (*it)[2].str();
    const size_t index = std::stoul(r);
    if (index < g.members.size()) out.insert(g.members[index]);
  }
  return out;
}

// The ranks whose last call failed because a peer died: where they stopped
// tells when the connection broke, not that they were late (a survivor
// still finishing call N-1 when a peer that had gone on to N was killed).
// Who died, as their errors say.
struct CutOff {
  std::set<int> ranks;
  std::map<int, std::vector<int>> dead;  // dead rank -> the ranks whose errors name it
};
CutOff cut_off_by_deaths(const GroupView& g) {
  CutOff out;
  for (const auto& [rank, view] : g.ranks) {
    if (view.calls.empty()) continue;
    const json& last = *view.calls.rbegin()->second;
    if (last.value("state", "") != "failed") continue;
    const std::set<int> dead = named_dead(g, last);
    if (dead.empty() || dead.count(rank)) continue;
    out.ranks.insert(rank);
    for (int d : dead) out.dead[d].push_back(rank);
  }
  return out;
}

void summarize_group(std::ostringstream& out, const GroupView& g) {
  out << "group of ranks [" << join(g.members) << "] (" << g.transport << ")\n";
  // The last call every rank that dumped completed.
  std::optional<int64_t> all_done;
  for (const auto& [rank, view] : g.ranks) {
    int64_t done = -1;
    for (const auto& [seq, e] : view.calls)
      if (e->value("state", "") == "completed") done = std::max(done, seq);
    all_done = all_done ? std::min(*all_done, done) : done;
  }
  std::vector<int> silent;
  for (int m : g.members)
    if (!g.ranks.count(m)) silent.push_back(m);
  if (all_done && *all_done >= 0) {
    const json* e = g.ranks.begin()->second.calls.count(*all_done)
                        ? g.ranks.begin()->second.calls.at(*all_done)
                        : nullptr;
    out << "  every rank" << (silent.empty() ? "" : " that left a dump") << " completed call #" << *all_done
        << (e ? " " + describe(*e) : "") << "\n";
  } else if (all_done) {
    out << "  no call completed on every rank\n";
  }
  // The first call where ranks disagree, or where one has not arrived.
  std::set<int64_t> seqs;
  for (const auto& [rank, view] : g.ranks)
    for (const auto& [seq, e] : view.calls) seqs.insert(seq);
  std::map<int, std::optional<std::pair<int64_t, std::string>>> latest;
  for (int m : g.members) latest[m] = last_begun(g, m);
  const CutOff cut_off = cut_off_by_deaths(g);
  bool reported = false;
  for (int64_t seq : seqs) {
    std::map<std::string, std::vector<int>> by_call;
    std::vector<int> absent;
    bool all_dumped_have_it = true;
    for (int m : g.members) {
      auto it = g.ranks.find(m);
      if (it != g.ranks.end() && it->second.calls.count(seq)) {
        by_call[describe(*it->second.calls.at(seq))].push_back(m);
      } else if (cut_off.ranks.count(m)) {
        continue;  // stopped by a death, not late
      } else if (latest[m] && latest[m]->first < seq) {
        absent.push_back(m);
      } else if (it != g.ranks.end()) {
        all_dumped_have_it = false;  // overwritten in its ring: nothing to compare
      }
    }
    if (!all_dumped_have_it) continue;
    if (by_call.size() > 1) {
      out << "  first call where ranks disagree: #" << seq << ":";
      for (const auto& [call, ranks] : by_call) out << " " << ranks_text(ranks) << " " << call << ";";
      out.seekp(-1, std::ios_base::cur);
      out << "\n";
      reported = true;
      break;
    }
    if (!absent.empty()) {
      const auto& [call, ranks] = *by_call.begin();
      out << "  first call a rank is missing from: #" << seq << " " << call << ": " << ranks_text(ranks)
          << " in it, " << ranks_text(absent)
          << (g.transport == "shared memory" ? " never began it"
                                             : " sent none of its messages that reached them")
          << "\n";
      reported = true;
      break;
    }
  }
  if (!reported && !seqs.empty()) {
    out << "  every rank" << (silent.empty() ? "" : " that left a dump")
        << " made the same calls in the same order\n";
  }
  // Who died, as the errors of the ranks it cut off say.
  for (const auto& [dead, witnesses] : cut_off.dead) {
    out << "  died: rank " << dead << " (its connections closed without a goodbye, as the error of "
        << ranks_text(witnesses) << " says)";
    if (latest[dead]) out << "; its last call: #" << latest[dead]->first << " " << latest[dead]->second;
    out << "\n";
  }
  // Who is behind: the lowest last call begun, of the ranks a death did
  // not stop.
  std::optional<int64_t> lowest, highest;
  for (const auto& [m, last] : latest) {
    if (!last) continue;
    if (!cut_off.ranks.count(m)) lowest = lowest ? std::min(*lowest, last->first) : last->first;
    highest = highest ? std::max(*highest, last->first) : last->first;
  }
  if (lowest && highest && *lowest < *highest) {
    for (const auto& [m, last] : latest) {
      if (last && last->first == *lowest && !cut_off.ranks.count(m)) {
        out << "  behind: rank " << m << ", " << (*highest - *lowest)
            << " call(s) behind the furthest; its last call: #" << last->first << " " << last->second << "\n";
      }
    }
  }
  // Ranks nothing is known of (over TCP ranks keep no records their peers
  // can read): the calls the others are stuck in are the lead.
  std::vector<int> unknown;
  for (int m : silent)
    if (!latest[m]) unknown.push_back(m);
  if (!unknown.empty()) {
    std::map<std::string, std::vector<int>> stuck;
    for (const auto& [rank, view] : g.ranks) {
      if (view.calls.empty()) continue;
      const auto& [seq, e] = *view.calls.rbegin();
      if (e->value("state", "") != "completed")
        stuck["#" + std::to_string(seq) + " " + describe(*e)].push_back(rank);
    }
    out << "  " << ranks_text(unknown) << " left no dump and no record of "
        << (unknown.size() > 1 ? "their" : "its") << " calls";
    for (const auto& [call, ranks] : stuck) out << "; " << ranks_text(ranks) << " did not finish " << call;
    out << "\n";
  }
  // Each rank's first failure; ranks that failed alike on one line.
  std::map<std::string, std::vector<int>> failures;
  for (const auto& [rank, view] : g.ranks) {
    for (const auto& [seq, e] : view.calls) {
      if (e->value("state", "") != "failed") continue;
      std::string error = e->value("error", "");
      if (error.size() > 300) error = error.substr(0, 300) + "...";
      failures["call #" + std::to_string(seq) + " " + describe(*e) + ": " + error].push_back(rank);
      break;
    }
  }
  for (const auto& [what, ranks] : failures) out << "  " << ranks_text(ranks) << " failed " << what << "\n";
  // Who arrived last, over the calls every rank's dump holds.
  if (g.ranks.size() == g.members.size() && g.members.size() > 1) {
    std::map<int, int> last_count;
    std::map<int, int64_t> late_sum;
    int compared = 0;
    for (int64_t seq : seqs) {
      std::optional<std::pair<int64_t, int>> first, last;
      bool complete = true;
      for (const auto& [rank, view] : g.ranks) {
        auto it = view.calls.find(seq);
        if (it == view.calls.end() || !it->second->contains("started_ns")) {
          complete = false;
          break;
        }
        const int64_t t = it->second->at("started_ns").get<int64_t>() + view.offset_ns;
        if (!first || t < first->first) first = std::make_pair(t, rank);
        if (!last || t > last->first) last = std::make_pair(t, rank);
      }
      if (!complete) continue;
      ++compared;
      ++last_count[last->second];
      late_sum[last->second] += last->first - first->first;
    }
    if (compared > 0) {
      auto top = std::max_element(last_count.begin(), last_count.end(),
                                  [](const auto& a, const auto& b) { return a.second < b.second; });
      out << "  arrived last most often: rank " << top->first << " (" << top->second << " of " << compared
          << " calls, " << ms(late_sum[top->first] / top->second) << " after the first rank on average)\n";
    }
  }
}

}  // namespace

std::string summarize_traces(const std::vector<std::string>& dumps, const std::vector<std::string>& names) {
  const auto docs = parse_all(dumps, names);
  std::ostringstream out;
  std::vector<int> dumped;
  dumped.reserve(docs.size());
  for (const auto& doc : docs) dumped.push_back(doc.value("rank", -1));
  out << "tdist-trace: " << docs.size() << " dump(s), of " << ranks_text(dumped) << "\n";
  std::map<std::string, std::vector<int>> reasons;
  for (const auto& doc : docs) {
    std::string reason = doc.value("reason", "?");
    if (reason.size() > 120) reason = reason.substr(0, 120) + "...";
    reasons[reason].push_back(doc.value("rank", -1));
  }
  for (const auto& [reason, ranks] : reasons)
    out << "  " << ranks_text(ranks) << " dumped on: " << reason << "\n";
  for (const auto& g : group_views(docs)) summarize_group(out, g);
  return out.str();
}

std::string chrome_trace(const std::vector<std::string>& dumps, const std::vector<std::string>& names) {
  const auto docs = parse_all(dumps, names);
  const auto groups = group_views(docs);
  // Time zero: the earliest call of any rank.
  int64_t t0 = INT64_MAX;
  for (const auto& g : groups) {
    for (const auto& [rank, view] : g.ranks) {
      for (const auto& [seq, e] : view.calls) {
        if (e->contains("queued_ns")) t0 = std::min(t0, e->at("queued_ns").get<int64_t>() + view.offset_ns);
      }
    }
  }
  if (t0 == INT64_MAX) t0 = 0;
  auto us = [&](int64_t ns) { return static_cast<double>(ns - t0) / 1000.0; };
  json events = json::array();
  std::set<int> named;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const auto& g = groups[gi];
    for (const auto& [member, view] : g.ranks) {
      const int rank = member;  // a lambda below captures it (not a structured binding)
      if (named.insert(rank).second) {
        events.push_back({{"ph", "M"},
                          {"name", "process_name"},
                          {"pid", rank},
                          {"args", {{"name", "rank " + std::to_string(rank)}}}});
      }
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", rank},
                        {"tid", gi},
                        {"args", {{"name", "group [" + join(g.members) + "]"}}}});
      const int64_t dumped = view.dump->value("monotonic_ns", int64_t{0});
      for (const auto& [seq, e] : view.calls) {
        if (!e->contains("started_ns")) continue;
        const int64_t start = e->at("started_ns").get<int64_t>() + view.offset_ns;
        const bool finished = e->contains("finished_ns");
        const int64_t end = (finished ? e->at("finished_ns").get<int64_t>() : dumped) + view.offset_ns;
        // The last rank's arrival, from every rank's dump of this call.
        int64_t last_arrival = start;
        for (const auto& [peer, pv] : g.ranks) {
          auto it = pv.calls.find(seq);
          if (it != pv.calls.end() && it->second->contains("started_ns"))
            last_arrival = std::max(last_arrival, it->second->at("started_ns").get<int64_t>() + pv.offset_ns);
        }
        json args{{"seq", seq}, {"state", e->value("state", "?")}, {"call", describe(*e)}};
        if (e->contains("algorithm")) args["algorithm"] = e->at("algorithm");
        if (e->contains("error")) args["error"] = e->at("error");
        // The last rank to arrive waited for nobody: all transfer.
        const int64_t moving = std::min(last_arrival, end);
        args["wait_us"] = static_cast<double>(moving - start) / 1000.0;
        args["transfer_us"] = static_cast<double>(end - moving) / 1000.0;
        args["queued_us"] = static_cast<double>(start - e->value("queued_ns", start)) / 1000.0;
        auto slice = [&](const std::string& name, int64_t from, int64_t to) {
          return json{{"ph", "X"}, {"name", name},   {"cat", "tdist"},          {"pid", rank},
                      {"tid", gi}, {"ts", us(from)}, {"dur", us(to) - us(from)}};
        };
        json call = slice(e->value("op", "?") + (finished ? "" : " (unfinished)"), start, end);
        call["args"] = args;
        events.push_back(call);
        if (moving > start) events.push_back(slice("wait", start, moving));
        if (end > moving) events.push_back(slice("transfer", moving, end));
      }
    }
  }
  return json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
}

}  // namespace tdist
