#pragma once

/// @file debug.h
/// Debugging switches, as in the spec's "Debugging torch.distributed
/// applications":
///
/// - The debug level: OFF (default), INFO or DETAIL, from TDIST_DEBUG or,
///   when that is unset, TORCH_DISTRIBUTED_DEBUG. INFO logs each process
///   group's creation (backend, ranks, timeout); DETAIL also has the Python
///   package check, before each collective, that every rank passes the same
///   op with tensors of the same shapes, dtypes and devices (docs/python.md).
/// - TORCH_SHOW_CPP_STACKTRACES=1: every tdist exception's message ends with
///   the C++ stack where it was raised (errors.h).

#include <cstdint>
#include <memory>
#include <string>

namespace tdist {

/// torch.distributed's DebugLevel.
enum class DebugLevel : int { kOff = 0, kInfo = 1, kDetail = 2 };

/// The level in force. The first call reads the environment (see
/// set_debug_level_from_env()) unless set_debug_level() came first; a bad
/// value raises DistInvalidArgument from that call.
DebugLevel debug_level();
/// Sets the level for the whole process (every rank must set the same).
void set_debug_level(DebugLevel level);
/// Sets the level from TDIST_DEBUG, else TORCH_DISTRIBUTED_DEBUG: OFF, INFO
/// or DETAIL in any case; both unset or empty: OFF. Anything else raises
/// DistInvalidArgument naming the variable and its value (torch raises a
/// RuntimeError there too) and leaves the level as it was.
void set_debug_level_from_env();
/// The level the given values of TDIST_DEBUG and TORCH_DISTRIBUTED_DEBUG
/// stand for (null: unset); raises as set_debug_level_from_env(). For tests.
DebugLevel debug_level_from(const char* tdist_debug, const char* torch_debug);
/// "OFF", "INFO", "DETAIL".
const char* debug_level_name(DebugLevel level);

/// Whether exceptions carry their C++ stack: TORCH_SHOW_CPP_STACKTRACES=1,
/// read on first use ("0" or unset: no; anything else: no, with a warning).
bool show_cpp_stacktraces();
/// Overrides TORCH_SHOW_CPP_STACKTRACES for this process (tests, tools).
void set_show_cpp_stacktraces(bool show);

namespace detail {
/// What starts the stack in an exception's message.
inline constexpr const char* kCppStackMarker = "\nException raised from ";
/// `what` without the stack LazyCppStack added, if any.
std::string without_cpp_stack(const std::string& what);

/// The stack an error was raised with, taken as bare return addresses when
/// the error is made and named (symbols, file:line) only when its message
/// is first read: naming reads the modules' debug information, about half
/// a second in a new process, and most errors are never read (a peer's
/// clean close, made into an error that no operation ever carries).
struct LazyCppStack;
/// The calling thread's stack, or null when !show_cpp_stacktraces() or
/// `message` carries a stack already (an error rebuilt from another).
std::shared_ptr<const LazyCppStack> capture_cpp_stack(const std::string& message);
/// `message`, kCppStackMarker, the function that raised, and the frames
/// from there outwards; made once per stack (the same `message` every time:
/// its error's own).
const char* cpp_stack_text(const LazyCppStack& stack, const char* message) noexcept;
/// How many stacks cpp_stack_text has named in this process (for tests).
uint64_t cpp_stacks_named();
}  // namespace detail

}  // namespace tdist
