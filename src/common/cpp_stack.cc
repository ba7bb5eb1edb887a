// The C++ stack that TORCH_SHOW_CPP_STACKTRACES=1 adds to every tdist
// exception (debug.h), printed as torch's c10 prints it:
//
//     Exception raised from tdist::send(...) (most recent call first):
//     frame #0: tdist::send(...) at src/process_group/distributed_calls.cc:40 (0x7f.. in /path/_C.so)
//
// Frames are named by GCC's libbacktrace (libgcc-12-dev, which g++ depends
// on) when the build found it: it reads the symbol table and the DWARF line
// tables, so it names static functions and inlined frames, gives file:line,
// and works in the Python module, whose tdist symbols are all hidden
// (-Wl,--exclude-libs,ALL). glibc's backtrace_symbols, the fallback, only
// knows exported symbols: most frames there show as module + offset, for
// `addr2line -Cfe MODULE OFFSET`.

#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#ifdef TDIST_HAVE_LIBBACKTRACE
#include <backtrace.h>
#endif

#include "tdist/debug.h"

namespace tdist::detail {
namespace {

constexpr int kMaxFrames = 64;

struct Frame {
  uintptr_t pc = 0;
  std::string function;  // demangled; empty if unknown
  std::string file;      // empty if unknown
  int line = 0;
};

std::string demangle(const char* symbol) {
  if (symbol == nullptr) return {};
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> out(abi::__cxa_demangle(symbol, nullptr, nullptr, &status),
                                                  &std::free);
  return status == 0 && out ? std::string(out.get()) : std::string(symbol);
}

#ifdef TDIST_HAVE_LIBBACKTRACE

void ignore_error(void*, const char*, int) {}

backtrace_state* state() {
  // Created once and kept: it caches what it read of each module.
  static backtrace_state* instance = backtrace_create_state(nullptr, /*threaded=*/1, ignore_error, nullptr);
  return instance;
}

int add_frame(void* data, uintptr_t pc, const char* file, int line, const char* function) {
  auto& frames = *static_cast<std::vector<Frame>*>(data);
  if (pc == static_cast<uintptr_t>(-1)) return 1;  // the end of the stack
  frames.push_back({pc, demangle(function), file != nullptr ? file : "", line});
  return frames.size() >= kMaxFrames ? 1 : 0;
}

std::string symbol_at(uintptr_t pc) {
  std::string name;
  backtrace_syminfo(
      state(), pc,
      [](void* out, uintptr_t, const char* symbol, uintptr_t, uintptr_t) {
        *static_cast<std::string*>(out) = demangle(symbol);
      },
      ignore_error, &name);
  return name;
}

int add_pc(void* data, uintptr_t pc) {
  auto& pcs = *static_cast<std::vector<uintptr_t>*>(data);
  if (pc == static_cast<uintptr_t>(-1)) return 1;
  pcs.push_back(pc);
  return pcs.size() >= kMaxFrames ? 1 : 0;
}

// The return addresses alone: unwinding, without reading debug information.
std::vector<uintptr_t> capture_pcs() {
  std::vector<uintptr_t> pcs;
  if (state() != nullptr) backtrace_simple(state(), /*skip=*/0, add_pc, ignore_error, &pcs);
  return pcs;
}

std::vector<Frame> name_frames(const std::vector<uintptr_t>& pcs) {
  std::vector<Frame> frames;
  if (state() == nullptr) return frames;
  for (uintptr_t pc : pcs) {
    const size_t before = frames.size();
    backtrace_pcinfo(state(), pc, add_frame, ignore_error, &frames);
    if (frames.size() == before) frames.push_back({pc, "", "", 0});
    if (frames.size() >= kMaxFrames) break;
  }
  // A pc's frames are its inlined calls, innermost first, then the function
  // that holds the code. The debug information names some functions only
  // briefly ("TestBody", "capture" for members and anonymous namespaces);
  // the symbol table has that last function's full name.
  for (size_t i = 0; i < frames.size(); ++i) {
    if (i + 1 < frames.size() && frames[i + 1].pc == frames[i].pc) continue;
    std::string full = symbol_at(frames[i].pc);
    if (!full.empty()) frames[i].function = std::move(full);
  }
  return frames;
}

#else

std::vector<uintptr_t> capture_pcs() {
  void* addresses[kMaxFrames];
  const int depth = backtrace(addresses, kMaxFrames);
  std::vector<uintptr_t> pcs;
  for (int i = 1; i < depth; ++i)
    pcs.push_back(reinterpret_cast<uintptr_t>(addresses[i]));  // 0 is this function
  return pcs;
}

std::vector<Frame> name_frames(const std::vector<uintptr_t>& pcs) {
  std::vector<Frame> frames;
  for (uintptr_t pc : pcs) {
    Dl_info info{};
    const bool found = dladdr(reinterpret_cast<void*>(pc), &info) != 0 && info.dli_sname != nullptr;
    frames.push_back({pc, found ? demangle(info.dli_sname) : ""});
  }
  return frames;
}

#endif

bool ends_with(const std::string& text, const std::string& end) {
  return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
}

// Frames of the error machinery: this file and the constructors of
// errors.h, which every error passes through.
bool is_error_machinery(const Frame& frame) {
  if (ends_with(frame.file, "cpp_stack.cc") || ends_with(frame.file, "tdist/errors.h")) return true;
  const std::string& name = frame.function;
  if (name.rfind("tdist::detail::", 0) == 0 && name.find("capture") != std::string::npos) return true;
  if (name.rfind("tdist::Dist", 0) != 0) return false;
  const size_t colons = name.find("::", 7);
  return colons != std::string::npos && name.compare(colons, 6, "::Dist") == 0;
}

std::string describe(const Frame& frame) {
  Dl_info info{};
  const void* pc = reinterpret_cast<const void*>(frame.pc);
  const bool found = dladdr(pc, &info) != 0;
  const char* module = found && info.dli_fname != nullptr ? info.dli_fname : "?";
  std::ostringstream out;
  out << (frame.function.empty() ? "<unknown function>" : frame.function);
  if (!frame.file.empty()) out << " at " << frame.file << ':' << frame.line;
  out << " (" << pc << " in " << module;
  if (frame.function.empty() && found) {
    out << " +0x" << std::hex << frame.pc - reinterpret_cast<uintptr_t>(info.dli_fbase);
  }
  out << ')';
  return out.str();
}

std::atomic<uint64_t> stacks_named{0};

std::string stack_text(const std::string& message, const std::vector<uintptr_t>& pcs) {
  stacks_named.fetch_add(1, std::memory_order_relaxed);
  std::vector<Frame> frames;
  {
    // One naming at a time: libbacktrace's threaded state synchronizes
    // with atomics of a library built without ThreadSanitizer, which sees
    // two threads reading the same debug information as a race; errors
    // are rare, and waiting for another's naming costs nothing that counts.
    static std::mutex naming;
    std::lock_guard<std::mutex> lock(naming);
    frames = name_frames(pcs);
  }
  size_t first = 0;
  while (first < frames.size() && is_error_machinery(frames[first])) ++first;
  std::string origin;
  std::string text;
  for (size_t i = first; i < frames.size(); ++i) {
    const std::string frame = describe(frames[i]);
    if (origin.empty()) origin = frames[i].function.empty() ? frame : frames[i].function;
    text += "\nframe #" + std::to_string(i - first) + ": " + frame;
  }
  return message + kCppStackMarker + origin + " (most recent call first):" + text;
}

}  // namespace

struct LazyCppStack {
  std::vector<uintptr_t> pcs;
  mutable std::once_flag once;
  mutable std::string text;
};

std::shared_ptr<const LazyCppStack> capture_cpp_stack(const std::string& message) {
  if (!show_cpp_stacktraces() || message.find(kCppStackMarker) != std::string::npos) return nullptr;
  auto stack = std::make_shared<LazyCppStack>();
  stack->pcs = capture_pcs();
  return stack;
}

const char* cpp_stack_text(const LazyCppStack& stack, const char* message) noexcept {
  try {
    std::call_once(stack.once, [&] { stack.text = stack_text(message, stack.pcs); });
    return stack.text.c_str();
  } catch (...) {
    return message;  // out of memory while naming the frames: the message alone
  }
}

uint64_t cpp_stacks_named() {
  return stacks_named.load(std::memory_order_relaxed);
}

std::string without_cpp_stack(const std::string& what) {
  return what.substr(0, what.find(kCppStackMarker));
}

}  // namespace tdist::detail
