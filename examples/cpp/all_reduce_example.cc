// Every rank adds its rank + 1 into a gradient; each checks the sum.
// Run under a launcher that sets env:// variables (tdistrun, torchrun,
// mpirun with MASTER_ADDR/MASTER_PORT).

#include <cstdio>
#include <vector>

#include "tdist/distributed.h"
#include "tdist/version.h"

int main() {
  tdist::init_process_group({.init_method = "env://"});
  const int rank = tdist::get_rank();
  const int world = tdist::get_world_size();
  std::vector<float> grad(1000, static_cast<float>(rank + 1));
  tdist::all_reduce(tdist::Tensor::wrap(grad), tdist::ReduceOp::SUM);
  const float expected = static_cast<float>(world * (world + 1) / 2);
  int wrong = 0;
  for (float g : grad) wrong += g != expected;
  std::printf("rank %d of %d: tdist %s, all_reduce sum %g, %d wrong\n", rank, world, tdist::version(),
              static_cast<double>(grad[0]), wrong);
  tdist::destroy_process_group();
  return wrong == 0 ? 0 : 1;
}
