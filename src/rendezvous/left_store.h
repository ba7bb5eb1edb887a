#pragma once

// A store this process has left. Rank 0 keeps the store it hosts serving
// after its destroy_process_group() until the other ranks have left it
// (src/process_group/store_leave.h), so a rank that destroys and
// initializes again on the same port may reach the last job's store
// instead of the next one's. Each leaving rank sets this process's key in
// the store; the rendezvous of a joining rank that finds its own key there
// knows it reached the store it left, and tries again.

#include <string>

namespace tdist::detail {

// "tdist_left_process/<random>-<pid>": unique to this process (a forked
// child has its own), the same for every store it leaves.
std::string this_process_left_key();

// This process leaves the store at host:port: remembered before it says
// so in the store, so that its next rendezvous there checks the key and
// takes a store closing under it for the one it left, not a failure.
void remember_left_store(const std::string& host, int port);
bool left_store_at(const std::string& host, int port);

}  // namespace tdist::detail
