// Every collective of the tdist backend against references computed here,
// over world sizes 1-8, ranks as threads and as processes, counts 0, 1, odd
// and large, every dtype and every valid reduce op. About 730 lines in one
// file: each op's reference sits beside the parameterised test that holds
// the op to it, over one shared grid of sizes, modes and dtypes.

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "pg_harness.h"
#include "tdist/errors.h"

namespace tdist::testing {
namespace {

using Kind = ReduceOp::Kind;

const std::vector<Kind> kAllOps = {Kind::SUM, Kind::PRODUCT, Kind::MIN,        Kind::MAX, Kind::BAND,
                                   Kind::BOR, Kind::BXOR,    Kind::PREMUL_SUM, Kind::AVG};

// The suite also runs under each other way of moving data on shared memory
// (tests/process_group/CMakeLists.txt), which sets TDIST_TEST_SAMPLE_DTYPE_OPS:
// there the reduction kernels are the default run's, and what varies is how
// the bytes move, so every dtype (each element size) is reduced with SUM,
// float32 and int32 with every op, and a diagonal of the other pairs: about
// a third of the pairs, for a third of the suite's time.
bool dtype_op_wanted(DType dtype, Kind kind) {
  static const bool sample = std::getenv("TDIST_TEST_SAMPLE_DTYPE_OPS") != nullptr;
  if (!sample || kind == Kind::SUM || dtype == DType::kFloat32 || dtype == DType::kInt32) return true;
  return (static_cast<int>(dtype) + static_cast<int>(kind)) % 4 == 0;
}

ReduceOp make_op(Kind kind) {
  return kind == Kind::PREMUL_SUM ? ReduceOp::premul_sum(2.0) : ReduceOp(kind);
}

bool is_bitwise(Kind k) {
  return k == Kind::BAND || k == Kind::BOR || k == Kind::BXOR;
}

// The value rank r contributes at element i: small integers, exact in every
// dtype; bool and bitwise ops get their own ranges.
double contribution(DType dtype, Kind op, int r, int64_t i) {
  if (dtype == DType::kBool) return static_cast<double>((r + i) % 2);
  if (is_bitwise(op)) return static_cast<double>((r * 7 + i * 3) % 16);
  if (op == Kind::PRODUCT) return 1 + static_cast<double>((r + i) % 2);
  return 1 + static_cast<double>((r + i) % 3);
}

// op over n contributions, in the arithmetic the dtype defines.
double reference(DType dtype, Kind op, int n, int64_t i) {
  if (dtype == DType::kBool) {
    bool any = false;
    bool all = true;
    bool parity = false;
    for (int r = 0; r < n; ++r) {
      bool v = contribution(dtype, op, r, i) != 0;
      any = any || v;
      all = all && v;
      parity = parity != v;
    }
    if (op == Kind::SUM || op == Kind::MAX || op == Kind::BOR) return any;
    if (op == Kind::BXOR) return parity;
    return all;
  }
  std::vector<double> v;
  for (int r = 0; r < n; ++r) v.push_back(contribution(dtype, op, r, i));
  if (is_integral(dtype, false)) {
    int64_t acc = op == Kind::PRODUCT ? 1 : (op == Kind::BAND ? -1 : 0);
    if (op == Kind::MIN) acc = INT64_MAX;
    if (op == Kind::MAX) acc = INT64_MIN;
    for (double d : v) {
      auto x = static_cast<int64_t>(d);
      switch (op) {
        case Kind::SUM:
        case Kind::AVG:
          acc += x;
          break;
        case Kind::PREMUL_SUM:
          acc += 2 * x;
          break;
        case Kind::PRODUCT:
          acc *= x;
          break;
        case Kind::MIN:
          acc = std::min(acc, x);
          break;
        case Kind::MAX:
          acc = std::max(acc, x);
          break;
        case Kind::BAND:
          acc &= x;
          break;
        case Kind::BOR:
          acc |= x;
          break;
        case Kind::BXOR:
          acc ^= x;
          break;
      }
    }
    if (op == Kind::AVG) acc /= n;
    return static_cast<double>(acc);
  }
  double acc = op == Kind::PRODUCT ? 1 : 0;
  if (op == Kind::MIN) acc = INFINITY;
  if (op == Kind::MAX) acc = -INFINITY;
  for (double x : v) {
    switch (op) {
      case Kind::SUM:
      case Kind::AVG:
        acc += x;
        break;
      case Kind::PREMUL_SUM:
        acc += 2 * x;
        break;
      case Kind::PRODUCT:
        acc *= x;
        break;
      case Kind::MIN:
        acc = std::min(acc, x);
        break;
      case Kind::MAX:
        acc = std::max(acc, x);
        break;
      default:
        break;
    }
  }
  if (op == Kind::AVG) {
    // float32 and the 16-bit types divide in float, float64 in double.
    if (dtype == DType::kFloat64 || dtype == DType::kComplex128) return acc / n;
    return static_cast<double>(static_cast<float>(acc) / static_cast<float>(n));
  }
  return acc;
}

void expect_reduced(const Tensor& got, Kind op, int n, const std::string& what) {
  Tensor want =
      make_tensor(got.dtype(), got.numel(), [&](int64_t i) { return reference(got.dtype(), op, n, i); });
  for (int64_t i = 0; i < got.numel(); ++i) {
    check(real_at(got, i) == real_at(want, i) && imag_at(got, i) == imag_at(want, i), [&] {
      return what + ": element " + std::to_string(i) + " is " + std::to_string(real_at(got, i)) + "+" +
             std::to_string(imag_at(got, i)) + "i, expected " + std::to_string(real_at(want, i)) + "+" +
             std::to_string(imag_at(want, i)) + "i";
    });
  }
}

std::string label(const char* op, DType dtype, Kind kind, int64_t count) {
  return std::string(op) + " " + dtype_name(dtype) + " " + reduce_op_name(kind) + " count " +
         std::to_string(count);
}

class Collectives : public WorldsTest {};

// The last count is just past the one-shot limit (32 KiB) in every dtype:
// two-shot, or single copy where the group can (every rank reads its piece
// from the others and writes the result into them).
TEST_P(Collectives, AllReduceEveryDtypeAndReduceOp) {
  EXPECT_EQ(with_groups(
                mode(), n(),
                [&](ProcessGroup& pg, int rank) {
                  for (DType dtype : kAllDTypes) {
                    for (Kind kind : kAllOps) {
                      if (!is_reduce_supported(dtype, make_op(kind)) || !dtype_op_wanted(dtype, kind))
                        continue;
                      const auto past_one_shot = static_cast<int64_t>(32768 / element_size(dtype) + 7);
                      for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{33}, past_one_shot}) {
                        Tensor t = make_tensor(dtype, count,
                                               [&](int64_t i) { return contribution(dtype, kind, rank, i); });
                        pg.all_reduce(t, make_op(kind))->wait();
                        expect_reduced(t, kind, pg.size(), label("all_reduce", dtype, kind, count));
                      }
                    }
                  }
                }),
            "");
}

// Above the one-shot limit (32 KiB) the reductions run two-shot, where
// PREMUL_SUM puts each rank's own premultiplied piece where its result goes
// (wrong on ranks 2 and up once: the pairwise passes overwrote it before
// reading it). Every summing op, two dtypes, all_reduce and reduce to the
// last rank.
TEST_P(Collectives, TwoShotSizesForEverySummingOp) {
  EXPECT_EQ(with_groups(mode(), n(),
                        [&](ProcessGroup& pg, int rank) {
                          const int root = pg.size() - 1;
                          for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
                            for (Kind kind : {Kind::SUM, Kind::AVG, Kind::PREMUL_SUM}) {
                              const int64_t count = 20001;  // 80 or 160 KB
                              auto input = [&] {
                                return make_tensor(dtype, count, [&](int64_t i) {
                                  return contribution(dtype, kind, rank, i);
                                });
                              };
                              Tensor t = input();
                              pg.all_reduce(t, make_op(kind))->wait();
                              expect_reduced(t, kind, pg.size(), label("all_reduce", dtype, kind, count));
                              Tensor r = input();
                              pg.reduce(r, root, make_op(kind))->wait();
                              if (rank == root) {
                                expect_reduced(r, kind, pg.size(), label("reduce", dtype, kind, count));
                              }
                            }
                          }
                        }),
            "");
}

TEST_P(Collectives, AllReduceLargeFloat32IsExactAndBitwiseIdentical) {
  EXPECT_EQ(with_groups(mode(), n(),
                        [&](ProcessGroup& pg, int rank) {
                          const int64_t count = 1 << 20;
                          std::vector<float> data(count);
                          for (int64_t i = 0; i < count; ++i) data[i] = static_cast<float>((i % 7) + rank);
                          Tensor t = Tensor::wrap(data);
                          pg.all_reduce(t, ReduceOp::SUM)->wait();
                          float base = static_cast<float>(pg.size() * (pg.size() - 1) / 2);
                          for (int64_t i = 0; i < count; ++i) {
                            check(data[i] == static_cast<float>(i % 7) * pg.size() + base, [&] {
                              return "element " + std::to_string(i) + " is " + std::to_string(data[i]);
                            });
                          }
                          // Sums whose value depends on the order of additions:
                          // every rank must still hold the same bits.
                          std::vector<float> odd(1001);
                          for (size_t i = 0; i < odd.size(); ++i) {
                            odd[i] = (rank + i) % 3 == 0 ? 1e8f : ((rank + i) % 3 == 1 ? 1.0f : -1e8f + 3.0f);
                          }
                          Tensor o = Tensor::wrap(odd);
                          pg.all_reduce(o, ReduceOp::SUM)->wait();
                          Tensor all = Tensor::empty(DType::kFloat32, {pg.size(), 1001});
                          pg.all_gather_into_tensor(all, o)->wait();
                          const auto* bits = static_cast<const uint32_t*>(all.data());
                          for (int r = 1; r < pg.size(); ++r) {
                            check(std::memcmp(bits, bits + r * 1001, 1001 * 4) == 0,
                                  "all_reduce results differ between rank 0 and rank " + std::to_string(r));
                          }
                        }),
            "");
}

TEST_P(Collectives, BroadcastFromEveryRoot) {
  EXPECT_EQ(with_groups(mode(), n(),
                        [&](ProcessGroup& pg, int rank) {
                          for (int root = 0; root < pg.size(); ++root) {
                            for (int64_t count : {0, 1, 7, 300001}) {
                              Tensor t = make_tensor(DType::kInt32, count, [&](int64_t i) {
                                return rank == root ? static_cast<double>(i * 3 + root) : -1.0;
                              });
                              pg.broadcast(t, root)->wait();
                              for (int64_t i = 0; i < count; ++i) {
                                check(real_at(t, i) == static_cast<double>(i * 3 + root), [&] {
                                  return "broadcast root " + std::to_string(root) + " element " +
                                         std::to_string(i);
                                });
                              }
                            }
                          }
                        }),
            "");
}

TEST_P(Collectives, ReduceToEveryRootLeavesOtherInputsAlone) {
  EXPECT_EQ(
      with_groups(mode(), n(),
                  [&](ProcessGroup& pg, int rank) {
                    for (int root = 0; root < pg.size(); ++root) {
                      for (Kind kind : {Kind::SUM, Kind::MAX, Kind::AVG}) {
                        for (int64_t count : {0, 1, 7, 100003}) {
                          Tensor t = make_tensor(DType::kFloat64, count, [&](int64_t i) {
                            return contribution(DType::kFloat64, kind, rank, i);
                          });
                          Tensor before = t.clone();
                          pg.reduce(t, root, make_op(kind))->wait();
                          if (rank == root) {
                            expect_reduced(t, kind, pg.size(), label("reduce", DType::kFloat64, kind, count));
                          } else {
                            check(t.nbytes() == 0 || std::memcmp(t.data(), before.data(), t.nbytes()) == 0,
                                  "reduce changed a non-root input");
                          }
                        }
                      }
                    }
                  }),
      "");
}

TEST_P(Collectives, AllGatherListWithDifferentSizesPerRank) {
  EXPECT_EQ(
      with_groups(mode(), n(),
                  [&](ProcessGroup& pg, int rank) {
                    auto size_of = [](int r) { return static_cast<int64_t>(r % 3 == 0 ? r + 1 : 2 * r); };
                    Tensor in =
                        make_tensor(DType::kInt16, size_of(rank), [&](int64_t i) { return rank * 100 + i; });
                    std::vector<Tensor> outs;
                    for (int r = 0; r < pg.size(); ++r)
                      outs.push_back(Tensor::zeros(DType::kInt16, {size_of(r)}));
                    pg.all_gather(outs, in)->wait();
                    for (int r = 0; r < pg.size(); ++r) {
                      for (int64_t i = 0; i < size_of(r); ++i) {
                        check(real_at(outs[static_cast<size_t>(r)], i) == r * 100 + i, [&] {
                          return "all_gather block " + std::to_string(r) + " element " + std::to_string(i);
                        });
                      }
                    }
                  }),
      "");
}

// Blocks in separate tensors, 17 MiB and some in all at every world size
// from 2: TCP runs the call in slices through a reused staging buffer,
// shared memory writes each block in place (tdist_backend.cc).
TEST_P(Collectives, AllGatherListOfLargeSeparateBlocks) {
  EXPECT_EQ(
      with_groups(mode(), n(),
                  [&](ProcessGroup& pg, int rank) {
                    const int64_t per_rank = (int64_t{17} << 20) / 2 / pg.size();  // int16 elements
                    auto count_of = [&](int r) { return per_rank + 2 * r + 1; };
                    auto value = [](int r, int64_t i) { return static_cast<int16_t>((r * 7 + i) % 30011); };
                    Tensor in = Tensor::zeros(DType::kInt16, {count_of(rank)});
                    auto* mine = static_cast<int16_t*>(in.data());
                    for (int64_t i = 0; i < count_of(rank); ++i) mine[i] = value(rank, i);
                    std::vector<Tensor> outs;
                    for (int r = 0; r < pg.size(); ++r)
                      outs.push_back(Tensor::zeros(DType::kInt16, {count_of(r)}));
                    pg.all_gather(outs, in)->wait();
                    for (int r = 0; r < pg.size(); ++r) {
                      const auto* got = static_cast<const int16_t*>(outs[static_cast<size_t>(r)].data());
                      for (int64_t i = 0; i < count_of(r); ++i) {
                        if (got[i] != value(r, i)) {
                          check(false, "all_gather block " + std::to_string(r) + " element " +
                                           std::to_string(i) + ": " + std::to_string(got[i]));
                          return;
                        }
                      }
                    }
                  }),
      "");
}

TEST_P(Collectives, AllGatherIntoTensorConcatenatedStackedInPlaceAndUneven) {
  EXPECT_EQ(
      with_groups(
          mode(), n(),
          [&](ProcessGroup& pg, int rank) {
            const int p = pg.size();
            for (int64_t count : {0, 1, 5, 200001}) {
              Tensor in = make_tensor(DType::kFloat32, count, [&](int64_t i) { return rank + i * 0.5; });
              Tensor concat = Tensor::zeros(DType::kFloat32, {p * count});
              pg.all_gather_into_tensor(concat, in)->wait();
              Tensor stacked = Tensor::zeros(DType::kFloat32, {p, count});
              pg.all_gather_into_tensor(stacked, in)->wait();
              // In place: the input is this rank's slot of the output.
              Tensor inplace = Tensor::zeros(DType::kFloat32, {p * count});
              Tensor slot = inplace.view(rank * count, count);
              slot.copy_from(in);
              pg.all_gather_into_tensor(inplace, slot)->wait();
              for (int r = 0; r < p; ++r) {
                for (int64_t i = 0; i < count; i += std::max<int64_t>(1, count / 97)) {
                  double want = r + i * 0.5;
                  check(real_at(concat, r * count + i) == want && real_at(stacked, r * count + i) == want &&
                            real_at(inplace, r * count + i) == want,
                        [&] { return "all_gather_into_tensor rank block " + std::to_string(r); });
                }
              }
            }
            // Uneven: rank r contributes r rows of 3.
            std::vector<int64_t> splits;
            int64_t rows = 0;
            for (int r = 0; r < p; ++r) {
              splits.push_back(r);
              rows += r;
            }
            Tensor in = make_tensor(DType::kInt64, rank * 3, [&](int64_t i) { return rank * 1000 + i; });
            in = in.reshape({rank, 3});
            Tensor out = Tensor::zeros(DType::kInt64, {rows, 3});
            pg.all_gather_into_tensor_uneven(out, in, splits)->wait();
            int64_t at = 0;
            for (int r = 0; r < p; ++r) {
              for (int64_t i = 0; i < r * 3; ++i) {
                check(real_at(out, at++) == r * 1000 + i, "uneven all_gather block " + std::to_string(r));
              }
            }
          }),
      "");
}

TEST_P(Collectives, GatherAndScatterFromEveryRoot) {
  EXPECT_EQ(with_groups(mode(), n(),
                        [&](ProcessGroup& pg, int rank) {
                          const int p = pg.size();
                          for (int root = 0; root < p; ++root) {
                            for (int64_t count : {0, 1, 9, 70001}) {
                              Tensor in = make_tensor(DType::kUInt8, count,
                                                      [&](int64_t i) { return (rank * 31 + i) % 256; });
                              std::vector<Tensor> list;
                              if (rank == root) {
                                for (int r = 0; r < p; ++r)
                                  list.push_back(Tensor::zeros(DType::kUInt8, {count}));
                              }
                              pg.gather(list, in, root)->wait();
                              if (rank == root) {
                                for (int r = 0; r < p; ++r) {
                                  for (int64_t i = 0; i < count; i += std::max<int64_t>(1, count / 101)) {
                                    check(real_at(list[static_cast<size_t>(r)], i) == (r * 31 + i) % 256,
                                          [&] { return "gather block " + std::to_string(r); });
                                  }
                                }
                              }
                              std::vector<Tensor> sources;
                              if (rank == root) {
                                for (int r = 0; r < p; ++r) {
                                  sources.push_back(make_tensor(
                                      DType::kUInt8, count, [&](int64_t i) { return (r + 7 * i) % 256; }));
                                }
                              }
                              Tensor out = Tensor::zeros(DType::kUInt8, {count});
                              pg.scatter(out, sources, root)->wait();
                              for (int64_t i = 0; i < count; i += std::max<int64_t>(1, count / 101)) {
                                check(real_at(out, i) == (rank + 7 * i) % 256,
                                      [&] { return "scatter element " + std::to_string(i); });
                              }
                            }
                          }
                        }),
            "");
}

TEST_P(Collectives, ReduceScatterListTensorAndUneven) {
  EXPECT_EQ(
      with_groups(
          mode(), n(),
          [&](ProcessGroup& pg, int rank) {
            const int p = pg.size();
            for (Kind kind : {Kind::SUM, Kind::MIN, Kind::AVG, Kind::PREMUL_SUM}) {
              for (int64_t count : {0, 1, 7, 150001}) {
                // Block r holds element values indexed from r * count.
                Tensor in = make_tensor(DType::kFloat64, p * count, [&](int64_t i) {
                  return contribution(DType::kFloat64, kind, rank, i);
                });
                Tensor out = Tensor::zeros(DType::kFloat64, {count});
                pg.reduce_scatter_tensor(out, in, make_op(kind))->wait();
                for (int64_t i = 0; i < count; ++i) {
                  check(real_at(out, i) == reference(DType::kFloat64, kind, p, rank * count + i), [&] {
                    return label("reduce_scatter_tensor", DType::kFloat64, kind, count) + " element " +
                           std::to_string(i);
                  });
                }
              }
            }
            // List form with a different size per destination.
            std::vector<Tensor> inputs;
            for (int r = 0; r < p; ++r) {
              inputs.push_back(make_tensor(DType::kInt32, r + 2, [&](int64_t i) { return rank + i + r; }));
            }
            Tensor out = Tensor::zeros(DType::kInt32, {rank + 2});
            pg.reduce_scatter(out, inputs, ReduceOp::SUM)->wait();
            for (int64_t i = 0; i < rank + 2; ++i) {
              check(real_at(out, i) == p * (i + rank) + p * (p - 1) / 2, "reduce_scatter list element");
            }
            // Uneven tensor form: rank r gets r + 1 rows of 2.
            std::vector<int64_t> splits;
            int64_t rows = 0;
            for (int r = 0; r < p; ++r) {
              splits.push_back(r + 1);
              rows += r + 1;
            }
            Tensor uin =
                make_tensor(DType::kInt64, rows * 2, [&](int64_t i) { return i + rank; }).reshape({rows, 2});
            Tensor uout = Tensor::zeros(DType::kInt64, {rank + 1, 2});
            pg.reduce_scatter_tensor_uneven(uout, uin, splits, ReduceOp::SUM)->wait();
            int64_t first = 0;
            for (int r = 0; r < rank; ++r) first += (r + 1) * 2;
            for (int64_t i = 0; i < (rank + 1) * 2; ++i) {
              check(real_at(uout, i) == p * (first + i) + p * (p - 1) / 2, "uneven reduce_scatter");
            }
          }),
      "");
}

TEST_P(Collectives, AllToAllListsAndSingleWithEqualAndUnequalSplits) {
  EXPECT_EQ(with_groups(mode(), n(),
                        [&](ProcessGroup& pg, int rank) {
                          const int p = pg.size();
                          // Lists: rank s sends s + d + 1 elements to d.
                          std::vector<Tensor> ins;
                          std::vector<Tensor> outs;
                          for (int d = 0; d < p; ++d) {
                            ins.push_back(make_tensor(DType::kFloat32, rank + d + 1,
                                                      [&](int64_t i) { return rank * 100 + d * 10 + i; }));
                            outs.push_back(Tensor::zeros(DType::kFloat32, {d + rank + 1}));
                          }
                          pg.all_to_all(outs, ins)->wait();
                          for (int s = 0; s < p; ++s) {
                            for (int64_t i = 0; i < s + rank + 1; ++i) {
                              check(real_at(outs[static_cast<size_t>(s)], i) == s * 100 + rank * 10 + i,
                                    [&] { return "all_to_all block from rank " + std::to_string(s); });
                            }
                          }
                          // Single, equal splits: two rows of 3 per peer.
                          Tensor in = make_tensor(DType::kInt32, p * 6, [&](int64_t i) {
                                        return rank * 1000 + i;
                                      }).reshape({p * 2, 3});
                          Tensor out = Tensor::zeros(DType::kInt32, {p * 2, 3});
                          pg.all_to_all_single(out, in, {}, {})->wait();
                          for (int s = 0; s < p; ++s) {
                            for (int64_t i = 0; i < 6; ++i) {
                              check(real_at(out, s * 6 + i) == s * 1000 + rank * 6 + i,
                                    [&] { return "all_to_all_single equal"; });
                            }
                          }
                          // Single, unequal: rank s sends (s + d) % 3 rows to d.
                          std::vector<int64_t> in_splits, out_splits;
                          int64_t in_rows = 0, out_rows = 0;
                          for (int d = 0; d < p; ++d) {
                            in_splits.push_back((rank + d) % 3);
                            out_splits.push_back((d + rank) % 3);
                            in_rows += (rank + d) % 3;
                            out_rows += (d + rank) % 3;
                          }
                          Tensor uin = make_tensor(DType::kInt32, in_rows * 2, [&](int64_t i) {
                                         return rank * 1000 + i;
                                       }).reshape({in_rows, 2});
                          Tensor uout = Tensor::zeros(DType::kInt32, {out_rows, 2});
                          pg.all_to_all_single(uout, uin, out_splits, in_splits)->wait();
                          int64_t at = 0;
                          for (int s = 0; s < p; ++s) {
                            int64_t first = 0;  // where block `rank` starts in s's input
                            for (int d = 0; d < rank; ++d) first += ((s + d) % 3) * 2;
                            for (int64_t i = 0; i < ((s + rank) % 3) * 2; ++i) {
                              check(real_at(uout, at++) == s * 1000 + first + i, [&] {
                                return "all_to_all_single unequal from rank " + std::to_string(s);
                              });
                            }
                          }
                        }),
            "");
}

TEST_P(Collectives, AllToAllBlocksAroundTheOneRoundLimit) {
  // On shared memory, tiny blocks travel in the flag line, blocks that fit
  // one section of a buffer with the sizes in one round, larger ones take
  // rounds of their own. These sizes straddle the flag line's limit (16
  // bytes per block at 2 ranks, 3 at 8) and the section's for the default
  // 1 MiB buffers and for the 4 KiB ones of the shm4k run, for every world
  // size: equal blocks, and blocks where only rank 0's are large (so the
  // others packed theirs in the flag line or the first round while the call
  // needs the buffer or more rounds).
  EXPECT_EQ(with_groups(mode(), n(),
                        [&](ProcessGroup& pg, int rank) {
                          const int p = pg.size();
                          for (int64_t big : {int64_t{3}, int64_t{16}, int64_t{17}, int64_t{448},
                                              int64_t{449}, int64_t{2017}, int64_t{5000}, int64_t{600'000}}) {
                            for (bool only_rank0 : {false, true}) {
                              auto block = [&](int src) { return only_rank0 && src != 0 ? int64_t{3} : big; };
                              auto value = [](int src, int dst, int64_t i) {
                                return static_cast<double>((src * 31 + dst * 7 + i) % 251);
                              };
                              std::vector<int64_t> in_splits(static_cast<size_t>(p), block(rank));
                              std::vector<int64_t> out_splits;
                              int64_t out_total = 0;
                              for (int s = 0; s < p; ++s) {
                                out_splits.push_back(block(s));
                                out_total += block(s);
                              }
                              Tensor in = make_tensor(DType::kUInt8, block(rank) * p, [&](int64_t i) {
                                return value(rank, static_cast<int>(i / block(rank)), i % block(rank));
                              });
                              Tensor out = Tensor::zeros(DType::kUInt8, {out_total});
                              pg.all_to_all_single(out, in, out_splits, in_splits)->wait();
                              int64_t at = 0;
                              for (int s = 0; s < p; ++s) {
                                check_elements(
                                    out, at, block(s), [&](int64_t i) { return value(s, rank, i); },
                                    "all_to_all of " + std::to_string(big) + "-byte blocks" +
                                        (only_rank0 ? " (rank 0 only)" : "") + ", block from rank " +
                                        std::to_string(s));
                                at += block(s);
                              }
                            }
                          }
                        }),
            "");
}

TEST_P(Collectives, ManySmallBroadcastsAndReducesFromRotatingRootsAmidOtherOps) {
  // Small broadcasts and reduces on shared memory do not wait for their
  // readers: writers use a ring of slots that wraps every 128 operations.
  // 600 broadcasts in a row from changing roots, of 1 to 49 bytes (49 takes
  // the rounds), with a small reduce every fifth and an all_reduce now and then:
  // every value must arrive, none overwritten before every rank read it.
  EXPECT_EQ(
      with_groups(
          mode(), n(),
          [&](ProcessGroup& pg, int rank) {
            const int p = pg.size();
            for (int i = 0; i < 600; ++i) {
              const int root = (i * 7 / 3) % p;
              const int64_t bytes = 1 + (i * 13) % 49;
              auto value = [&](int64_t j) { return static_cast<double>((i * 5 + j) % 256); };
              Tensor t = rank == root ? make_tensor(DType::kUInt8, bytes, value)
                                      : Tensor::zeros(DType::kUInt8, {bytes});
              pg.broadcast(t, root)->wait();
              check_elements(t, 0, bytes, value,
                             "broadcast #" + std::to_string(i) + " from rank " + std::to_string(root));
              if (i % 5 == 4) {  // a small reduce takes the same ring
                Tensor r = make_tensor(DType::kFloat64, 5, [&](int64_t j) { return rank * 10 + j + i; });
                pg.reduce(r, root, ReduceOp::SUM)->wait();
                if (rank == root) {
                  check(real_at(r, 4) == 10.0 * p * (p - 1) / 2 + p * (4 + i), "reduce between broadcasts");
                }
              }
              if (i % 37 == 36) {
                Tensor s = make_tensor(DType::kInt64, 3, [&](int64_t j) { return rank + j; });
                pg.all_reduce(s, ReduceOp::SUM)->wait();
                check(real_at(s, 2) == p * (p - 1) / 2 + 2 * p, "all_reduce between broadcasts");
              }
            }
          }),
      "");
}

TEST_P(Collectives, ARootRunningAheadOfALateReaderNeverOverwritesWhatItHasNotRead) {
  // Rank 0 broadcasts 400 small messages in a row while the last rank starts
  // late (the pause only lets the root get ahead; nothing waits on it): the
  // root may run at most one ring of slots ahead, and the late rank must
  // still read every message as it was sent.
  EXPECT_EQ(with_groups(mode(), n(),
                        [&](ProcessGroup& pg, int rank) {
                          const int p = pg.size();
                          if (p > 1 && rank == p - 1)
                            std::this_thread::sleep_for(std::chrono::milliseconds(200));
                          for (int i = 0; i < 400; ++i) {
                            auto value = [&](int64_t j) { return static_cast<double>(i * 4 + j); };
                            Tensor t = rank == 0 ? make_tensor(DType::kInt32, 4, value)
                                                 : Tensor::zeros(DType::kInt32, {4});
                            pg.broadcast(t, 0)->wait();
                            check_elements(t, 0, 4, value, "broadcast #" + std::to_string(i));
                          }
                        }),
            "");
}

TEST_P(Collectives, LargeMovesBetweenRoundOpsWithALateRankKeepEveryElement) {
  // Broadcast, all_gather and gather of over 1 MiB per writer, uneven
  // blocks included, between all_reduces that run in rounds. On shared
  // memory the large moves go through a ring of slots where single copy
  // does not take them (the gathers only where ranks have a core each; in
  // the suite's ring run every size goes through it);
  // the last rank starts late (the pause only lets the others get ahead;
  // nothing waits on it), so writers fill their rings and must wait for it
  // before reusing a slot. Every element is checked.
  EXPECT_EQ(with_groups(mode(), n(),
                        [&](ProcessGroup& pg, int rank) {
                          const int p = pg.size();
                          if (p > 1 && rank == p - 1)
                            std::this_thread::sleep_for(std::chrono::milliseconds(100));
                          constexpr int64_t kCount = 300007;  // int32: 1.2 MB
                          for (int iter = 0; iter < 2; ++iter) {
                            const int root = (iter + 1) % p;
                            auto sent = [&](int64_t i) { return static_cast<double>(i * 5 + root + iter); };
                            Tensor b = rank == root ? make_tensor(DType::kInt32, kCount, sent)
                                                    : Tensor::zeros(DType::kInt32, {kCount});
                            pg.broadcast(b, root)->wait();
                            check_elements(b, 0, kCount, sent, "broadcast #" + std::to_string(iter));

                            Tensor s = make_tensor(DType::kInt64, 1000, [&](int64_t i) { return rank + i; });
                            pg.all_reduce(s, ReduceOp::SUM)->wait();
                            check_elements(
                                s, 0, 1000, [&](int64_t i) { return p * (p - 1) / 2 + p * i; },
                                "all_reduce between large moves");

                            // Rank r contributes kCount + r * 4099 elements.
                            auto count_of = [&](int r) { return kCount + r * 4099; };
                            auto mine = [&](int r) {
                              return [=](int64_t i) { return static_cast<double>(r * 1000003 + i + iter); };
                            };
                            Tensor in = make_tensor(DType::kInt32, count_of(rank), mine(rank));
                            std::vector<Tensor> outs;
                            for (int r = 0; r < p; ++r)
                              outs.push_back(Tensor::zeros(DType::kInt32, {count_of(r)}));
                            pg.all_gather(outs, in)->wait();
                            for (int r = 0; r < p; ++r) {
                              check_elements(outs[static_cast<size_t>(r)], 0, count_of(r), mine(r),
                                             "all_gather block " + std::to_string(r));
                            }
                            Tensor even = make_tensor(DType::kInt32, kCount, mine(rank));
                            std::vector<Tensor> list;
                            if (rank == root) {
                              for (int r = 0; r < p; ++r)
                                list.push_back(Tensor::zeros(DType::kInt32, {kCount}));
                            }
                            pg.gather(list, even, root)->wait();
                            for (int r = 0; rank == root && r < p; ++r) {
                              check_elements(list[static_cast<size_t>(r)], 0, kCount, mine(r),
                                             "gather block " + std::to_string(r));
                            }
                          }
                        }),
            "");
}

TEST_P(Collectives, BarrierCompletesOnEveryRank) {
  EXPECT_EQ(with_groups(mode(), n(),
                        [&](ProcessGroup& pg, int) {
                          for (int i = 0; i < 5; ++i) pg.barrier()->wait();
                        }),
            "");
}

std::vector<std::tuple<Mode, int>> world_cases() {
  std::vector<std::tuple<Mode, int>> out;
  for (int n : {1, 2, 3, 4, 5, 8}) out.emplace_back(Mode::kThreads, n);
  for (int n : {2, 3, 5}) out.emplace_back(Mode::kProcesses, n);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Worlds, Collectives, ::testing::ValuesIn(world_cases()), [](const auto& p) {
  return std::string(mode_name(std::get<0>(p.param))) + "_" + std::to_string(std::get<1>(p.param));
});

}  // namespace
}  // namespace tdist::testing
