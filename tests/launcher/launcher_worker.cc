// The program the launcher tests run under tdistrun. Its first argument
// (after an optional --local-rank=N, which it records) picks what it does:
//
//   env                    print the launch environment on one line
//   rendezvous             env:// rendezvous; every rank checks the others' keys
//   fail RANK CODE         once every rank has printed "ready pid=P" (they meet through
//                          env:// rendezvous first), RANK writes 25 lines to stderr
//                          and exits CODE; the others block
//   selfkill RANK          the same, but RANK kills itself with SIGKILL
//   block [--ignore-term] [--grandchild]
//                          print "ready pid=P [grandchild=G]" and wait to be stopped
//   fail-once MARKER       rank 0 fails (exit 4) unless MARKER exists, creating it;
//                          once it exists every rank prints its attempt and exits 0
//   per-attempt SPEC...    what to do on attempt K (TORCHELASTIC_RESTART_COUNT) is
//                          SPEC K (the last SPEC after that); a SPEC is
//                          ACTION[/ACTION...], one per local rank (the last for the
//                          rest): CODE (print "attempt=K rank=R exit=CODE", exit
//                          CODE), wait:CODE (print "ready pid=P attempt=K", wait for
//                          SIGUSR2, then as CODE) or hold (as block --ignore-term)
//   lone-restart RANK CODE every rank joins the store (env://) and prints "ready pid=P";
//                          once all have, RANK exits CODE (0 < CODE < 256) or, with
//                          CODE 0, kills itself with SIGKILL, on every incarnation
//                          whose TDIST_RESTART_COUNT is below the next argument
//                          (default 1); the others wait for a key that a later
//                          incarnation of RANK sets, then every rank prints
//                          "done rank=R restart=K torchelastic_restart=K pid=P"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tdist/errors.h"
#include "tdist/rendezvous.h"
#include "tdist/tcp_store.h"

namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): single-threaded
  return value != nullptr ? value : "unset";
}

int rank() {
  return std::atoi(env("RANK").c_str());
}

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

[[noreturn]] void block_forever() {
  for (;;) pause();
}

[[noreturn]] void ready_and_block(bool ignore_term, bool grandchild) {
  std::string line = "ready pid=" + std::to_string(getpid());
  if (grandchild) {
    pid_t child = fork();
    if (child == 0) block_forever();  // stays in the rank's process group
    line += " grandchild=" + std::to_string(child);
  }
  if (ignore_term) std::signal(SIGTERM, SIG_IGN);
  say(line);
  block_forever();
}

// Every rank but `target` prints "ready pid=P" and blocks; `target` returns
// once they all have, so the test knows every pid before anything fails.
void others_ready_then(int target) {
  auto r = tdist::rendezvous("env://", -1, -1, std::chrono::seconds(30));
  if (r.rank != target) say("ready pid=" + std::to_string(getpid()));
  if (r.store->add("ready", 1) == r.world_size) r.store->set("all_ready", "1");
  if (r.rank != target) block_forever();
  r.store->wait({"all_ready"});
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t end = text.find(separator); end != std::string::npos; end = text.find(separator, start)) {
    parts.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  parts.push_back(text.substr(start));
  return parts;
}

int per_attempt(const std::vector<std::string>& specs) {
  const size_t attempt = std::strtoul(env("TORCHELASTIC_RESTART_COUNT").c_str(), nullptr, 10);
  const std::vector<std::string> actions = split(specs[std::min(attempt, specs.size() - 1)], '/');
  const size_t local = std::strtoul(env("LOCAL_RANK").c_str(), nullptr, 10);
  std::string action = actions[std::min(local, actions.size() - 1)];
  if (action == "hold") ready_and_block(true, false);
  if (action.rfind("wait:", 0) == 0) {
    // SIGUSR2 is blocked before "ready" is printed, so a signal sent as
    // soon as the test reads it is never lost.
    sigset_t usr2;
    sigemptyset(&usr2);
    sigaddset(&usr2, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &usr2, nullptr);
    say("ready pid=" + std::to_string(getpid()) + " attempt=" + std::to_string(attempt));
    int sig = 0;
    sigwait(&usr2, &sig);
    action = action.substr(5);
  }
  say("attempt=" + std::to_string(attempt) + " rank=" + env("RANK") + " exit=" + action);
  return std::atoi(action.c_str());
}

// The store must outlive RANK's death (tdistrun hosts it): the others wait
// on it for RANK's next incarnation.
int lone_restart(int target, int code, int fail_until) {
  auto r = tdist::rendezvous("env://", -1, -1, std::chrono::seconds(30));
  const int restart = std::atoi(env("TDIST_RESTART_COUNT").c_str());
  say("ready pid=" + std::to_string(getpid()) + " restart=" + std::to_string(restart));
  if (restart == 0 && r.store->add("ready", 1) == r.world_size) r.store->set("all_ready", "1");
  if (r.rank == target) {
    if (restart < fail_until) {
      r.store->wait({"all_ready"});
      std::fprintf(stderr, "rank %d fails on incarnation %d\n", r.rank, restart);
      std::fflush(stderr);
      if (code == 0) raise(SIGKILL);
      return code;
    }
    r.store->set("back", std::to_string(getpid()));
  } else {
    r.store->wait({"back"});
  }
  say("done rank=" + std::to_string(r.rank) + " restart=" + env("TDIST_RESTART_COUNT") +
      " torchelastic_restart=" + env("TORCHELASTIC_RESTART_COUNT") +
      " agent_store=" + env("TORCHELASTIC_USE_AGENT_STORE") + " pid=" + std::to_string(getpid()));
  return 0;
}

// Returns once every rank got here and, on rank 0, once every other rank
// has left: rank 0 may host the store, and leaves after everyone else is
// done with it.
void leave_together(const tdist::RendezvousResult& r) {
  if (r.store->add("arrived", 1) == r.world_size) r.store->set("open", "1");
  r.store->wait({"open"});
  if (r.world_size > 1) {
    if (r.rank != 0 && r.store->add("left", 1) == r.world_size - 1) r.store->set("all_left", "1");
    if (r.rank == 0) r.store->wait({"all_left"});
  }
}

// What a rank learns of the job's token (tdistrun's job_token.h): the
// variables, the file's mode and a digest of its contents (never the
// token), and whether the ranks' store lets in a client without it.
int auth_check() {
  auto r = tdist::rendezvous("env://", -1, -1, std::chrono::seconds(30));
  auto set = [](const char* name) {
    const char* value = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): single-threaded
    return value != nullptr && *value != '\0';
  };
  const std::string file = set("TDIST_AUTH_TOKEN_FILE") ? env("TDIST_AUTH_TOKEN_FILE") : "";
  std::string mode = "none";
  std::string digest = "none";
  if (!file.empty()) {
    struct stat st {};
    if (stat(file.c_str(), &st) == 0) {
      char octal[8];
      std::snprintf(octal, sizeof(octal), "%o", static_cast<unsigned>(st.st_mode & 0777));
      mode = octal;
    }
    FILE* f = std::fopen(file.c_str(), "rb");
    if (f != nullptr) {
      std::string content;
      char buf[256];
      size_t n = 0;
      while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) content.append(buf, n);
      std::fclose(f);
      digest =
          std::to_string(std::hash<std::string>{}(content) % 1000003) + "/" + std::to_string(content.size());
    }
  }
  std::string stranger = "admitted";
  {
    tdist::TCPStoreOptions options;
    options.port = static_cast<uint16_t>(std::atoi(env("MASTER_PORT").c_str()));
    options.timeout = std::chrono::seconds(10);
    options.auth_token = "";  // a client that does not know the token
    try {
      tdist::TCPStore client(env("MASTER_ADDR"), options);
      client.set("stranger/" + std::to_string(r.rank), "1");
    } catch (const tdist::DistStoreError& e) {
      stranger =
          std::string(e.what()).find("requires authentication") != std::string::npos ? "refused" : e.what();
    }
  }
  say("auth rank=" + std::to_string(r.rank) + " path=" + (file.empty() ? "none" : file) + " token_env=" +
      (set("TDIST_AUTH_TOKEN") ? "set" : "unset") + " file=" + (file.empty() ? "unset" : "set") +
      " mode=" + mode + " digest=" + digest + " stranger=" + stranger);
  leave_together(r);
  return 0;
}

int rendezvous_check() {
  auto r = tdist::rendezvous("env://", -1, -1, std::chrono::seconds(30));
  r.store->set("hello/" + std::to_string(r.rank), std::to_string(r.rank));
  for (int peer = 0; peer < r.world_size; ++peer) {
    if (tdist::to_string(r.store->get("hello/" + std::to_string(peer))) != std::to_string(peer)) {
      std::fprintf(stderr, "wrong value from rank %d\n", peer);
      return 1;
    }
  }
  say("rdzv rank=" + std::to_string(r.rank) + " world=" + std::to_string(r.world_size) +
      " local=" + env("LOCAL_RANK") + " group=" + env("GROUP_RANK") + " port=" + env("MASTER_PORT"));
  leave_together(r);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string local_rank_arg = "none";
  if (!args.empty() && args[0].rfind("--local-rank=", 0) == 0) {
    local_rank_arg = args[0].substr(13);
    args.erase(args.begin());
  }
  if (args.empty()) {
    std::fprintf(stderr, "launcher_worker: no mode given\n");
    return 2;
  }
  const std::string& mode = args[0];
  try {
    if (mode == "env") {
      std::string rest;
      for (size_t i = 1; i < args.size(); ++i) rest += (i > 1 ? "," : "") + args[i];
      std::string line = "env";
      for (const char* name :
           {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
            "MASTER_ADDR", "MASTER_PORT", "TDIST_RESTART_COUNT", "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE",
            "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
            "TORCHELASTIC_USE_AGENT_STORE", "TDIST_MAX_RESTARTS"}) {
        line += std::string(" ") + name + "=" + env(name);
      }
      say(line + " local_rank_arg=" + local_rank_arg + " args=" + rest);
      return 0;
    }
    if (mode == "rendezvous") return rendezvous_check();
    if (mode == "auth") return auth_check();
    if (mode == "fail" && args.size() == 3) {
      others_ready_then(std::atoi(args[1].c_str()));
      for (int i = 1; i <= 25; ++i) std::fprintf(stderr, "error line %d of rank %d\n", i, rank());
      std::fflush(stderr);
      return std::atoi(args[2].c_str());
    }
    if (mode == "selfkill" && args.size() == 2) {
      others_ready_then(std::atoi(args[1].c_str()));
      std::fprintf(stderr, "about to kill myself\n");
      std::fflush(stderr);
      raise(SIGKILL);
      return 0;
    }
    if (mode == "block") {
      bool ignore_term = false;
      bool grandchild = false;
      for (size_t i = 1; i < args.size(); ++i) {
        ignore_term = ignore_term || args[i] == "--ignore-term";
        grandchild = grandchild || args[i] == "--grandchild";
      }
      ready_and_block(ignore_term, grandchild);
    }
    if (mode == "per-attempt" && args.size() >= 2) {
      return per_attempt(std::vector<std::string>(args.begin() + 1, args.end()));
    }
    if (mode == "lone-restart" && (args.size() == 3 || args.size() == 4)) {
      return lone_restart(std::atoi(args[1].c_str()), std::atoi(args[2].c_str()),
                          args.size() == 4 ? std::atoi(args[3].c_str()) : 1);
    }
    if (mode == "fail-once" && args.size() == 2) {
      const std::string& marker = args[1];
      if (access(marker.c_str(), F_OK) == 0) {
        say("attempt=" + env("TDIST_RESTART_COUNT") + " rank=" + env("RANK") +
            " ok torchelastic_restart=" + env("TORCHELASTIC_RESTART_COUNT") + " group=" + env("GROUP_RANK") +
            " world=" + env("WORLD_SIZE"));
        return 0;
      }
      if (rank() != 0) ready_and_block(false, false);
      int fd = open(marker.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      if (fd >= 0) close(fd);
      std::fprintf(stderr, "first attempt fails on purpose\n");
      return 4;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "launcher_worker: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "launcher_worker: bad arguments for mode '%s'\n", mode.c_str());
  return 2;
}
