#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "titan/core/error.h"
#include "titan/parallel/pipeline_schedule.h"

namespace titan::parallel {
namespace {

struct Layout {
  std::string name;
  int64_t ranks = 1, micro = 1, stages_per_rank = 1;
};

// Every layout each schedule accepts among pp in {1, 2, 4}, micro-batches in {1, 4, 8, 12} and
// its virtual-stage counts.
std::vector<Layout> accepted_layouts() {
  std::vector<Layout> out;
  for (int64_t p : {1, 2, 4})
    for (int64_t m : {1, 4, 8, 12}) {
      for (const char* name : {"GPipe", "1F1B", "ZBH1"}) out.push_back({name, p, m, 1});
      out.push_back({"ZBVZeroBubble", p, m, 2});
      if (m % p == 0)
        for (int64_t v : {2, 3}) out.push_back({"Interleaved1F1B", p, m, v});
    }
  return out;
}

std::string describe(const Layout& l) {
  return l.name + " p=" + std::to_string(l.ranks) + " m=" + std::to_string(l.micro) +
         " v=" + std::to_string(l.stages_per_rank);
}

PipelineSchedule make(const Layout& l) {
  return make_schedule(l.name, l.ranks, l.micro, l.stages_per_rank);
}

// The message of the titan::Error that `fn` throws; fails the test when it throws none.
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.message();
  }
  ADD_FAILURE() << "no titan::Error thrown";
  return "";
}

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

TEST(PipelineSchedule, EveryLayoutValidatesWithOneForwardAndOneBackwardPerStageAndMicroBatch) {
  for (const Layout& l : accepted_layouts()) {
    SCOPED_TRACE(describe(l));
    const PipelineSchedule s = make(l);
    EXPECT_NO_THROW(validate_schedule(s));
    EXPECT_EQ(s.num_stages(), l.ranks * l.stages_per_rank);
    const bool split = l.name == "ZBH1" || l.name == "ZBVZeroBubble";
    EXPECT_EQ(s.splits_backward(), split);
    ASSERT_EQ(static_cast<int64_t>(s.steps.size()), l.ranks);
    for (int64_t r = 0; r < l.ranks; ++r) {
      const auto& steps = s.steps[static_cast<size_t>(r)];
      EXPECT_EQ(static_cast<int64_t>(steps.size()), (split ? 3 : 2) * l.micro * l.stages_per_rank)
          << "rank " << r;
      auto count = [&](PipelineOp op) {
        return std::count_if(steps.begin(), steps.end(), [&](const PipelineStep& st) { return st.op == op; });
      };
      EXPECT_EQ(count(PipelineOp::forward), l.micro * l.stages_per_rank);
      EXPECT_EQ(count(PipelineOp::backward), split ? 0 : l.micro * l.stages_per_rank);
      EXPECT_EQ(count(PipelineOp::backward_input), split ? l.micro * l.stages_per_rank : 0);
      EXPECT_EQ(count(PipelineOp::backward_weight), split ? l.micro * l.stages_per_rank : 0);
      for (const PipelineStep& st : steps) EXPECT_EQ(s.rank_of_stage(st.stage), r);
    }
  }
}

TEST(PipelineSchedule, StagePlacementLoopsOrFoldsIntoAV) {
  const PipelineSchedule interleaved = make_schedule("Interleaved1F1B", 4, 8, 2);
  EXPECT_EQ(interleaved.stages_of_rank(1), (std::vector<int64_t>{1, 5}));
  const PipelineSchedule zbv = make_schedule("ZBVZeroBubble", 4, 8, 2);
  EXPECT_EQ(zbv.stages_of_rank(0), (std::vector<int64_t>{0, 7}));
  EXPECT_EQ(zbv.stages_of_rank(3), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(zbv.rank_of_stage(6), 1);
}

TEST(PipelineSchedule, LayoutsAScheduleCannotRunAreRefusedNamingTheKey) {
  std::string msg = error_of([] { make_schedule("Interleaved1F1B", 4, 6, 2); });
  EXPECT_HAS(msg, "parallelism.pipeline_parallel_microbatch_size) = 6 is not a multiple of 4; use 4 or 8");
  msg = error_of([] { make_schedule("Interleaved1F1B", 4, 2, 2); });
  EXPECT_HAS(msg, "use 4");
  msg = error_of([] { make_schedule("Interleaved1F1B", 2, 4, 1); });
  EXPECT_HAS(msg, "needs at least 2 virtual stages per rank");
  msg = error_of([] { make_schedule("ZBVZeroBubble", 2, 4, 3); });
  EXPECT_HAS(msg, "parallelism.pipeline_parallel_schedule = \"ZBVZeroBubble\" runs 2 stage(s) per rank");
  EXPECT_HAS(msg, "3 virtual stages per rank");
  msg = error_of([] { make_schedule("1F1B", 2, 4, 2); });
  EXPECT_HAS(msg, "Interleaved1F1B / ZBVZeroBubble for more");
  msg = error_of([] { make_schedule("Looped", 2, 4); });
  EXPECT_HAS(msg, "parallelism.pipeline_parallel_schedule = \"Looped\" is not a schedule");
  msg = error_of([] { make_schedule("1F1B", 2, 0); });
  EXPECT_HAS(msg, "parallelism.pipeline_parallel_microbatch_size) = 0");
}

PipelineSchedule two_rank_table(std::vector<PipelineStep> rank0, std::vector<PipelineStep> rank1) {
  PipelineSchedule s;
  s.name = "hand";
  s.ranks = 2;
  s.micro_batches = 1;
  s.steps = {std::move(rank0), std::move(rank1)};
  return s;
}

constexpr PipelineOp F = PipelineOp::forward, B = PipelineOp::backward, I = PipelineOp::backward_input,
                     W = PipelineOp::backward_weight;

TEST(PipelineSchedule, ValidatorNamesTheStepsOfADeadlock) {
  // Rank 0 waits for rank 1's backward before running the forward rank 1 waits for.
  const PipelineSchedule s = two_rank_table({{B, 0, 0}, {F, 0, 0}}, {{F, 0, 1}, {B, 0, 1}});
  const std::string msg = error_of([&] { validate_schedule(s); });
  EXPECT_HAS(msg, "schedule \"hand\" deadlocks");
  EXPECT_HAS(msg, "rank 0 step 0 (B0.0) waits for rank 1 step 1 (B0.1)");
  EXPECT_HAS(msg, "rank 1 step 0 (F0.1) waits for rank 0 step 1 (F0.0)");
  EXPECT_NO_THROW(validate_schedule(two_rank_table({{F, 0, 0}, {B, 0, 0}}, {{F, 0, 1}, {B, 0, 1}})));
}

TEST(PipelineSchedule, ValidatorCatchesAMissingBackward) {
  PipelineSchedule s = make_schedule("1F1B", 2, 4);
  auto& rank1 = s.steps[1];
  rank1.erase(std::find_if(rank1.begin(), rank1.end(),
                           [](const PipelineStep& st) { return st.op == B && st.micro == 3; }));
  EXPECT_HAS(error_of([&] { validate_schedule(s); }), "micro-batch 3 of stage 1 has no backward");
}

TEST(PipelineSchedule, ValidatorCatchesAWeightGradientBeforeItsInputGradient) {
  PipelineSchedule s = make_schedule("ZBH1", 2, 4);
  auto& rank0 = s.steps[0];
  auto find = [&](PipelineOp op) {
    return std::find_if(rank0.begin(), rank0.end(),
                        [&](const PipelineStep& st) { return st.op == op && st.micro == 2; });
  };
  const auto w = find(W), i = find(I);
  const auto w_index = w - rank0.begin(), i_index = i - rank0.begin();
  std::iter_swap(w, i);
  EXPECT_HAS(error_of([&] { validate_schedule(s); }),
             "rank 0 step " + std::to_string(i_index) +
                 " (W2.0) runs before its backward_input rank 0 step " + std::to_string(w_index) + " (I2.0)");
  // A W alone (no I) and a W next to a whole backward are refused as well.
  EXPECT_HAS(error_of([] {
               validate_schedule(two_rank_table({{F, 0, 0}, {B, 0, 0}, {W, 0, 0}}, {{F, 0, 1}, {B, 0, 1}}));
             }),
             "rank 0 step 2 (W0.0) follows a whole backward rank 0 step 1 (B0.0)");
  EXPECT_HAS(error_of([] {
               validate_schedule(two_rank_table({{F, 0, 0}, {I, 0, 0}}, {{F, 0, 1}, {B, 0, 1}}));
             }),
             "micro-batch 0 of stage 0 has its input gradient rank 0 step 1 (I0.0) but no backward_weight");
}

TEST(PipelineSchedule, ValidatorCatchesAStepOnTheWrongRankOrRepeated) {
  EXPECT_HAS(error_of([] {
               validate_schedule(two_rank_table({{F, 0, 0}, {F, 0, 1}, {B, 0, 0}}, {{B, 0, 1}}));
             }),
             "rank 0 step 1 (F0.1) runs stage 1, which rank 1 holds");
  EXPECT_HAS(error_of([] {
               validate_schedule(two_rank_table({{F, 0, 0}, {F, 0, 0}, {B, 0, 0}}, {{F, 0, 1}, {B, 0, 1}}));
             }),
             "rank 0 step 1 (F0.0) repeats rank 0 step 0 (F0.0)");
  EXPECT_HAS(error_of([] {
               validate_schedule(two_rank_table({{F, 0, 0}, {B, 1, 0}}, {{F, 0, 1}, {B, 0, 1}}));
             }),
             "rank 0 step 1 (B1.0) is outside 1 micro-batches and 2 stages");
}

TEST(PipelineSchedule, GPipeAnd1F1BBubbleIsTheTextbookFraction) {
  // A whole backward costs b + w; the fraction holds for any split of the costs.
  for (const char* name : {"GPipe", "1F1B"})
    for (int64_t p : {1, 2, 4, 8})
      for (int64_t m : {1, 4, 8, 12}) {
        const PipelineSchedule s = make_schedule(name, p, m);
        const double want = static_cast<double>(p - 1) / static_cast<double>(m + p - 1);
        EXPECT_NEAR(analytical_bubble(s).fraction, want, 1e-15);
        EXPECT_EQ(analytical_bubble(s).formula, "(p-1)/(m+p-1)");
        for (auto [f, b, w] :
             {std::tuple{1.0, 1.0, 0.0}, std::tuple{1.0, 1.0, 1.0}, std::tuple{2.0, 1.0, 3.0}}) {
          const ScheduleTiming t = simulate_schedule(s, f, b, w);
          EXPECT_NEAR(t.bubble_fraction, want, 1e-12)
              << name << " p=" << p << " m=" << m << " f,b,w=" << f << b << w;
          EXPECT_DOUBLE_EQ(t.makespan, static_cast<double>(m + p - 1) * (f + b + w));
          for (double busy : t.busy) EXPECT_DOUBLE_EQ(busy, static_cast<double>(m) * (f + b + w));
        }
      }
}

TEST(PipelineSchedule, InterleavingShrinksTheBubbleByTheVirtualStageCount) {
  for (int64_t p : {2, 4})
    for (int64_t m : {4, 8, 12})
      for (int64_t v : {2, 3, 4}) {
        if (m % p != 0) continue;
        const PipelineSchedule s = make_schedule("Interleaved1F1B", p, m, v);
        const double want = static_cast<double>(p - 1) / static_cast<double>(v * m + p - 1);
        EXPECT_NEAR(simulate_schedule(s, 1, 1, 0).bubble_fraction, want, 1e-12) << p << " " << m << " " << v;
        EXPECT_NEAR(analytical_bubble(s).fraction, want, 1e-15);
        EXPECT_LT(want, simulate_schedule(make_schedule("1F1B", p, m), 1, 1, 0).bubble_fraction);
      }
}

TEST(PipelineSchedule, ZeroBubbleSchedulesLeaveOnlyTheStartUpBubble) {
  // With f = b = w the paper's ZB-H1 leaves (p-1)(f + b - w) = p-1 slots per rank, a third of
  // 1F1B's; ZB-V leaves only the p-1 forwards before the last rank starts, over twice the work.
  for (int64_t p : {2, 4})
    for (int64_t m : {4, 8, 12, 16}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      const PipelineSchedule h1 = make_schedule("ZBH1", p, m), zbv = make_schedule("ZBVZeroBubble", p, m, 2);
      const ScheduleTiming t1 = simulate_schedule(h1), tv = simulate_schedule(zbv);
      EXPECT_DOUBLE_EQ(t1.makespan, static_cast<double>(3 * m + p - 1));
      EXPECT_DOUBLE_EQ(tv.makespan, static_cast<double>(6 * m + p - 1));
      EXPECT_NEAR(t1.bubble_fraction, analytical_bubble(h1).fraction, 1e-12);
      EXPECT_NEAR(tv.bubble_fraction, analytical_bubble(zbv).fraction, 1e-12);
      const double one_f_one_b = simulate_schedule(make_schedule("1F1B", p, m)).bubble_fraction;
      EXPECT_LT(t1.bubble_fraction, one_f_one_b);
      EXPECT_LT(tv.bubble_fraction, t1.bubble_fraction);
      // The table is built at unit cost; the paper's ZB-H1 bubble (p-1)(f + b - w) holds for the
      // costs it assumes (w no larger than f) as well.
      for (auto [f, b, w] : {std::tuple{1.0, 1.0, 0.5}, std::tuple{1.0, 2.0, 1.0}, std::tuple{2.0, 2.0, 1.0}})
        EXPECT_DOUBLE_EQ(simulate_schedule(h1, f, b, w).makespan,
                         static_cast<double>(m) * (f + b + w) + static_cast<double>(p - 1) * (f + b - w))
            << "f,b,w=" << f << "," << b << "," << w;
    }
}

TEST(PipelineSchedule, PeakInFlightIsEachSchedulesMemory) {
  for (int64_t p : {1, 2, 4})
    for (int64_t m : {1, 4, 8, 12}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      const std::vector<int64_t> gpipe = peak_in_flight(make_schedule("GPipe", p, m));
      const std::vector<int64_t> one_f_one_b = peak_in_flight(make_schedule("1F1B", p, m));
      const std::vector<int64_t> zbh1 = peak_in_flight(make_schedule("ZBH1", p, m));
      for (int64_t r = 0; r < p; ++r) {
        EXPECT_EQ(gpipe[static_cast<size_t>(r)], m);
        EXPECT_EQ(one_f_one_b[static_cast<size_t>(r)], std::min(m, p - r));
      }
      EXPECT_EQ(zbh1, one_f_one_b);
      // ZB-V's 2p half stages per rank are 1F1B's first rank's peak, on every rank once m >= 2p.
      for (int64_t held : peak_in_flight(make_schedule("ZBVZeroBubble", p, m, 2))) {
        EXPECT_LE(held, 2 * p);
        if (m >= 2 * p) {
          EXPECT_EQ(held, 2 * p);
        }
      }
    }
}

TEST(PipelineSchedule, FormatDrawsOneSlotPerStep) {
  EXPECT_EQ(format_schedule(make_schedule("1F1B", 2, 4)),
            "1F1B: 2 ranks, 4 micro-batches, 1 stage(s) per rank\n"
            "rank 0: F0.0 F1.0 .    B0.0 F2.0 B1.0 F3.0 B2.0 .    B3.0\n"
            "rank 1: .    F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.1 B3.1 .\n");
  EXPECT_EQ(format_schedule(make_schedule("ZBH1", 2, 2)),
            "ZBH1: 2 ranks, 2 micro-batches, 1 stage(s) per rank\n"
            "rank 0: F0.0 F1.0 .    I0.0 W0.0 I1.0 W1.0\n"
            "rank 1: .    F0.1 I0.1 F1.1 I1.1 W0.1 W1.1\n");
}

}  // namespace
}  // namespace titan::parallel
