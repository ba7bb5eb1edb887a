#pragma once

// The group a call of the functional API (distributed.h) runs on, for the
// parts of that API that live outside distributed*.cc.

#include "tdist/process_group.h"

namespace tdist::detail {

/// `group`, or the default group for nullptr; raises DistError naming `op`
/// before init_process_group or for a group destroy_process_group destroyed.
Group resolve_group(const Group& group, const char* op);

/// Counts `group` among the groups made since init_process_group, so that
/// destroying the default group destroys it too (as new_group's groups).
void remember_group(const Group& group);

}  // namespace tdist::detail
