#include "titan/parallel/pipeline_schedule.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <sstream>

#include "titan/core/error.h"

namespace titan::parallel {

int64_t PipelineSchedule::num_stages() const {
  return ranks * stages_per_rank;
}

int64_t PipelineSchedule::rank_of_stage(int64_t stage) const {
  if (placement == StagePlacement::v) return stage < ranks ? stage : 2 * ranks - 1 - stage;
  return stage % ranks;
}

std::vector<int64_t> PipelineSchedule::stages_of_rank(int64_t rank) const {
  std::vector<int64_t> stages;
  for (int64_t s = 0; s < num_stages(); ++s)
    if (rank_of_stage(s) == rank) stages.push_back(s);
  return stages;
}

bool PipelineSchedule::splits_backward() const {
  for (const auto& rank_steps : steps)
    for (const PipelineStep& st : rank_steps)
      if (st.op == PipelineOp::backward_input || st.op == PipelineOp::backward_weight) return true;
  return false;
}

namespace {

constexpr const char* kScheduleKey = "parallelism.pipeline_parallel_schedule";
// The micro-batches of one pipeline run are training.local_batch_size over this key's size.
constexpr const char* kMicroKey = "the micro-batches (training.local_batch_size / parallelism.pipeline_parallel_microbatch_size)";

std::string label(const PipelineStep& st) {
  static constexpr char kLetters[] = {'F', 'B', 'I', 'W'};
  return kLetters[static_cast<int>(st.op)] + std::to_string(st.micro) + "." + std::to_string(st.stage);
}

bool is_backward(PipelineOp op) {
  return op == PipelineOp::backward || op == PipelineOp::backward_input;
}

PipelineSchedule empty_schedule(const std::string& name, int64_t ranks, int64_t micro_batches,
                                int64_t stages_per_rank, StagePlacement placement) {
  PipelineSchedule s;
  s.name = name;
  s.ranks = ranks;
  s.micro_batches = micro_batches;
  s.stages_per_rank = stages_per_rank;
  s.placement = placement;
  s.steps.resize(static_cast<size_t>(ranks));
  return s;
}

void require_stages_per_rank(const std::string& name, int64_t stages_per_rank, int64_t want) {
  TITAN_CHECK(stages_per_rank == want, kScheduleKey, " = \"", name, "\" runs ", want,
              " stage(s) per rank, and ", stages_per_rank, " virtual stages per rank were asked; use ", want,
              want == 1 ? ", or Interleaved1F1B / ZBVZeroBubble for more" : ", or 1F1B / ZBH1 for one");
}

PipelineSchedule gpipe(int64_t p, int64_t m) {
  PipelineSchedule s = empty_schedule("GPipe", p, m, 1, StagePlacement::loop);
  for (int64_t r = 0; r < p; ++r) {
    for (int64_t i = 0; i < m; ++i) s.steps[r].push_back({PipelineOp::forward, i, r});
    for (int64_t i = 0; i < m; ++i) s.steps[r].push_back({PipelineOp::backward, i, r});
  }
  return s;
}

// Rank r runs p-1-r forwards ahead, so it holds at most p-r micro-batches: the one it is about to
// send back and those still on their way down the pipeline.
PipelineSchedule one_f_one_b(int64_t p, int64_t m) {
  PipelineSchedule s = empty_schedule("1F1B", p, m, 1, StagePlacement::loop);
  for (int64_t r = 0; r < p; ++r) {
    const int64_t warmup = std::min(m, p - 1 - r);
    auto& out = s.steps[r];
    for (int64_t i = 0; i < warmup; ++i) out.push_back({PipelineOp::forward, i, r});
    for (int64_t i = 0; i < m - warmup; ++i) {
      out.push_back({PipelineOp::forward, warmup + i, r});
      out.push_back({PipelineOp::backward, i, r});
    }
    for (int64_t i = m - warmup; i < m; ++i) out.push_back({PipelineOp::backward, i, r});
  }
  return s;
}

// Megatron-LM's interleaved 1F1B (Narayanan et al. 2021): a rank walks its v stages in groups of
// p micro-batches (forwards stage by stage, backwards from its last stage back), and runs enough
// forwards ahead for the first backward of its last stage to come back.
PipelineSchedule interleaved_1f1b(int64_t p, int64_t m, int64_t v) {
  TITAN_CHECK(v >= 2, kScheduleKey, " = \"Interleaved1F1B\" needs at least 2 virtual stages per rank, and ",
              v, " was asked; use 2 or more, or \"1F1B\" for one stage per rank");
  TITAN_CHECK(m % p == 0, kScheduleKey,
              " = \"Interleaved1F1B\" walks micro-batches in groups of the pp degree: ", kMicroKey, " = ", m,
              " is not a multiple of ", p, "; use ", m > p ? std::to_string(m / p * p) + " or " : "",
              (m / p + 1) * p);
  PipelineSchedule s = empty_schedule("Interleaved1F1B", p, m, v, StagePlacement::loop);
  const int64_t total = v * m;
  auto micro = [&](int64_t k) { return k / (p * v) * p + k % p; };
  auto chunk = [&](int64_t k) { return k % (p * v) / p; };
  for (int64_t r = 0; r < p; ++r) {
    const int64_t warmup = m == p ? total : std::min(total, (p - r - 1) * 2 + (v - 1) * p);
    auto& out = s.steps[r];
    auto forward = [&](int64_t k) { out.push_back({PipelineOp::forward, micro(k), chunk(k) * p + r}); };
    auto backward = [&](int64_t k) {
      out.push_back({PipelineOp::backward, micro(k), (v - 1 - chunk(k)) * p + r});
    };
    for (int64_t k = 0; k < warmup; ++k) forward(k);
    for (int64_t k = 0; k < total - warmup; ++k) {
      forward(warmup + k);
      backward(k);
    }
    for (int64_t k = total - warmup; k < total; ++k) backward(k);
  }
  return s;
}

// Zero-bubble tables (Qi et al. 2023) are built by list scheduling at unit cost (f = b = w = 1):
// whenever a rank is free it runs a ready backward_input first (it unblocks the rank before it),
// else a ready forward while it holds fewer than `cap` activations (the memory bound) and owes
// fewer than `lag` weight gradients (whose inputs it also keeps), else the oldest pending
// backward_weight. Weight gradients thus land where the rank would otherwise idle.
struct Candidate {
  PipelineOp op = PipelineOp::forward;
  int64_t micro = 0;
  int64_t stage = 0;
};

void list_schedule(PipelineSchedule& s, const std::vector<int64_t>& cap, const std::vector<int64_t>& lag) {
  const int64_t p = s.ranks, m = s.micro_batches, n = s.num_stages();
  constexpr int64_t kNotRun = -1;
  // End time (unit slots) of each (op, micro, stage); kNotRun until scheduled.
  std::vector<int64_t> end_f(m * n, kNotRun), end_i(m * n, kNotRun), end_w(m * n, kNotRun);
  std::vector<int64_t> held(p, 0), owed(p, 0);
  auto at = [&](int64_t micro, int64_t stage) { return micro * n + stage; };
  auto done_by = [&](int64_t end, int64_t t) { return end != kNotRun && end <= t; };
  const int64_t total_steps = 3 * m * n;
  int64_t scheduled = 0;
  for (int64_t t = 0; scheduled < total_steps; ++t) {
    TITAN_CHECK(t <= 4 * total_steps, "building ", s.name, " for ", p, " ranks and ", m,
                " micro-batches stalled at slot ", t, "; this is a bug in the schedule builder");
    for (int64_t r = 0; r < p; ++r) {
      std::optional<Candidate> pick;
      const std::vector<int64_t> stages = s.stages_of_rank(r);
      // Backward inputs: lowest micro-batch first, then the later stage (it is further along).
      for (int64_t i = 0; i < m && !pick; ++i)
        for (auto it = stages.rbegin(); it != stages.rend() && !pick; ++it) {
          const int64_t st = *it;
          const int64_t dep = st == n - 1 ? end_f[at(i, st)] : end_i[at(i, st + 1)];
          if (end_i[at(i, st)] == kNotRun && done_by(dep, t))
            pick = Candidate{PipelineOp::backward_input, i, st};
        }
      // Forwards: the later stage first, so a micro-batch reaches the loss and turns back sooner.
      for (int64_t i = 0; i < m && !pick && held[r] < cap[r] && owed[r] < lag[r]; ++i)
        for (auto it = stages.rbegin(); it != stages.rend() && !pick; ++it) {
          const int64_t st = *it;
          if (end_f[at(i, st)] == kNotRun && (st == 0 || done_by(end_f[at(i, st - 1)], t)))
            pick = Candidate{PipelineOp::forward, i, st};
        }
      for (int64_t i = 0; i < m && !pick; ++i)
        for (int64_t st : stages)
          if (!pick && end_w[at(i, st)] == kNotRun && done_by(end_i[at(i, st)], t))
            pick = Candidate{PipelineOp::backward_weight, i, st};
      // With unit costs every rank is free again at each slot: what it started at t-1 has ended.
      if (!pick) continue;
      std::vector<int64_t>& ends = pick->op == PipelineOp::forward          ? end_f
                                   : pick->op == PipelineOp::backward_input ? end_i
                                                                            : end_w;
      ends[at(pick->micro, pick->stage)] = t + 1;
      if (pick->op == PipelineOp::forward) ++held[r];
      if (pick->op == PipelineOp::backward_input) --held[r], ++owed[r];
      if (pick->op == PipelineOp::backward_weight) --owed[r];
      s.steps[r].push_back({pick->op, pick->micro, pick->stage});
      ++scheduled;
    }
  }
}

// 1F1B's memory bound (rank r holds at most p-r micro-batches); the weight gradients fill what
// 1F1B leaves idle, which with f = b = w leaves (p-1)(f + b - w) per rank (the paper's ZB-H1).
// Owing up to p of them is what filling the cool-down takes; fewer costs idle slots at p = 4.
PipelineSchedule zb_h1(int64_t p, int64_t m) {
  PipelineSchedule s = empty_schedule("ZBH1", p, m, 1, StagePlacement::loop);
  std::vector<int64_t> cap(p);
  for (int64_t r = 0; r < p; ++r) cap[r] = p - r;
  list_schedule(s, cap, std::vector<int64_t>(p, p));
  return s;
}

// Every rank may hold 2p half-size stage activations, 1F1B's first rank's peak, so memory is
// balanced across ranks; the V turns at rank p-1 and the loss is computed on rank 0. As many
// weight gradients may be owed. The greedy order reaches the start-up-only bubble for most
// micro_batches >= p, not all: p = 4 with 5 micro-batches idles 1 slot more, p = 8 with 9 idles 5.
PipelineSchedule zbv(int64_t p, int64_t m) {
  PipelineSchedule s = empty_schedule("ZBVZeroBubble", p, m, 2, StagePlacement::v);
  list_schedule(s, std::vector<int64_t>(p, 2 * p), std::vector<int64_t>(p, 2 * p));
  return s;
}

// Where each (op, micro, stage) sits in the table, for the dependency walk.
struct Position {
  int64_t rank = -1;
  int64_t index = -1;
};

struct TableIndex {
  const PipelineSchedule& s;
  std::vector<Position> fwd = {}, bwd = {}, wgt = {};  // bwd: backward or backward_input

  explicit TableIndex(const PipelineSchedule& sched) : s(sched) {
    const size_t cells = static_cast<size_t>(s.micro_batches * s.num_stages());
    fwd.assign(cells, {});
    bwd.assign(cells, {});
    wgt.assign(cells, {});
  }
  size_t at(int64_t micro, int64_t stage) const {
    return static_cast<size_t>(micro * s.num_stages() + stage);
  }
  std::vector<Position>& slot(PipelineOp op) {
    return op == PipelineOp::forward ? fwd : op == PipelineOp::backward_weight ? wgt : bwd;
  }
  // The step this one waits for; none for the forward of stage 0.
  std::optional<Position> dependency(const PipelineStep& st) const {
    if (st.op == PipelineOp::forward)
      return st.stage == 0 ? std::nullopt : std::optional<Position>(fwd[at(st.micro, st.stage - 1)]);
    if (st.op == PipelineOp::backward_weight) return bwd[at(st.micro, st.stage)];
    return st.stage == s.num_stages() - 1 ? fwd[at(st.micro, st.stage)] : bwd[at(st.micro, st.stage + 1)];
  }
};

std::string where(const PipelineSchedule& s, int64_t rank, int64_t index) {
  return "rank " + std::to_string(rank) + " step " + std::to_string(index) + " (" +
         label(s.steps[static_cast<size_t>(rank)][static_cast<size_t>(index)]) + ")";
}

// Runs the table in dependency order with per-op costs; `cost` is indexed by PipelineOp.
struct Run {
  std::vector<std::vector<double>> start = {}, end = {};  // per rank, per step
  std::vector<size_t> next = {};                          // first step not run, per rank
  bool complete = false;
};

Run run_table(const PipelineSchedule& s, const TableIndex& index, const double (&cost)[4]) {
  Run run;
  const size_t p = s.steps.size();
  run.start.resize(p);
  run.end.resize(p);
  run.next.assign(p, 0);
  std::vector<double> free_at(p, 0.0);
  for (size_t r = 0; r < p; ++r) {
    run.start[r].resize(s.steps[r].size());
    run.end[r].resize(s.steps[r].size());
  }
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t r = 0; r < p; ++r) {
      while (run.next[r] < s.steps[r].size()) {
        const PipelineStep& st = s.steps[r][run.next[r]];
        double ready = free_at[r];
        if (std::optional<Position> dep = index.dependency(st)) {
          if (dep->index < 0 || static_cast<size_t>(dep->index) >= run.next[static_cast<size_t>(dep->rank)])
            break;
          ready = std::max(ready, run.end[static_cast<size_t>(dep->rank)][static_cast<size_t>(dep->index)]);
        }
        run.start[r][run.next[r]] = ready;
        free_at[r] = run.end[r][run.next[r]] = ready + cost[static_cast<int>(st.op)];
        ++run.next[r];
        progress = true;
      }
    }
  }
  run.complete = true;
  for (size_t r = 0; r < p; ++r) run.complete = run.complete && run.next[r] == s.steps[r].size();
  return run;
}

// Checks the table's contents and builds its index; the dependency walk is left to the caller.
TableIndex index_table(const PipelineSchedule& s) {
  TITAN_CHECK(s.ranks >= 1 && s.micro_batches >= 1 && s.stages_per_rank >= 1, "schedule \"", s.name,
              "\": ranks, micro-batches and stages per rank must be positive, found ", s.ranks, ", ",
              s.micro_batches, ", ", s.stages_per_rank);
  TITAN_CHECK(s.placement == StagePlacement::loop || s.stages_per_rank == 2, "schedule \"", s.name,
              "\": the V placement holds 2 stages per rank, found ", s.stages_per_rank);
  TITAN_CHECK(static_cast<int64_t>(s.steps.size()) == s.ranks, "schedule \"", s.name,
              "\" has step lists for ", s.steps.size(), " ranks, and its pp degree is ", s.ranks);
  TableIndex index(s);
  for (int64_t r = 0; r < s.ranks; ++r) {
    const auto& list = s.steps[static_cast<size_t>(r)];
    for (int64_t i = 0; i < static_cast<int64_t>(list.size()); ++i) {
      const PipelineStep& st = list[static_cast<size_t>(i)];
      TITAN_CHECK(st.micro >= 0 && st.micro < s.micro_batches && st.stage >= 0 && st.stage < s.num_stages(),
                  "schedule \"", s.name, "\": ", where(s, r, i), " is outside ", s.micro_batches,
                  " micro-batches and ", s.num_stages(), " stages");
      TITAN_CHECK(s.rank_of_stage(st.stage) == r, "schedule \"", s.name, "\": ", where(s, r, i),
                  " runs stage ", st.stage, ", which rank ", s.rank_of_stage(st.stage), " holds");
      Position& pos = index.slot(st.op)[index.at(st.micro, st.stage)];
      TITAN_CHECK(pos.rank < 0, "schedule \"", s.name, "\": ", where(s, r, i), " repeats ",
                  where(s, pos.rank, pos.index),
                  is_backward(st.op) ? " (one backward per micro-batch and stage)" : "");
      pos = {r, i};
    }
  }
  for (int64_t micro = 0; micro < s.micro_batches; ++micro)
    for (int64_t stage = 0; stage < s.num_stages(); ++stage) {
      const size_t at = index.at(micro, stage);
      const std::string cell = "micro-batch " + std::to_string(micro) + " of stage " + std::to_string(stage);
      TITAN_CHECK(index.fwd[at].rank >= 0, "schedule \"", s.name, "\": ", cell, " has no forward");
      TITAN_CHECK(index.bwd[at].rank >= 0, "schedule \"", s.name, "\": ", cell,
                  " has no backward (B, or I followed by W)");
      const Position b = index.bwd[at], w = index.wgt[at];
      const PipelineOp bop = s.steps[static_cast<size_t>(b.rank)][static_cast<size_t>(b.index)].op;
      if (bop == PipelineOp::backward) {
        TITAN_CHECK(w.rank < 0, "schedule \"", s.name, "\": ", where(s, w.rank, w.index),
                    " follows a whole backward ", where(s, b.rank, b.index),
                    ", which computed the weight gradients already");
      } else {
        TITAN_CHECK(w.rank >= 0, "schedule \"", s.name, "\": ", cell, " has its input gradient ",
                    where(s, b.rank, b.index), " but no backward_weight (W)");
        TITAN_CHECK(w.index > b.index, "schedule \"", s.name, "\": ", where(s, w.rank, w.index),
                    " runs before its backward_input ", where(s, b.rank, b.index));
      }
    }
  return index;
}

}  // namespace

PipelineSchedule make_schedule(const std::string& name, int64_t ranks, int64_t micro_batches,
                               int64_t stages_per_rank) {
  TITAN_CHECK(ranks >= 1, "a pipeline needs at least one rank, found ", ranks);
  TITAN_CHECK(micro_batches >= 1, kMicroKey, " = ", micro_batches, ": must be at least 1");
  PipelineSchedule s;
  if (name == "GPipe") {
    require_stages_per_rank(name, stages_per_rank, 1);
    s = gpipe(ranks, micro_batches);
  } else if (name == "1F1B") {
    require_stages_per_rank(name, stages_per_rank, 1);
    s = one_f_one_b(ranks, micro_batches);
  } else if (name == "Interleaved1F1B") {
    s = interleaved_1f1b(ranks, micro_batches, stages_per_rank);
  } else if (name == "ZBH1") {
    require_stages_per_rank(name, stages_per_rank, 1);
    s = zb_h1(ranks, micro_batches);
  } else if (name == "ZBVZeroBubble") {
    require_stages_per_rank(name, stages_per_rank, 2);
    s = zbv(ranks, micro_batches);
  } else {
    TITAN_CHECK(false, kScheduleKey, " = \"", name,
                "\" is not a schedule; use GPipe, 1F1B, Interleaved1F1B, ZBH1 or ZBVZeroBubble");
  }
  validate_schedule(s);
  return s;
}

void validate_schedule(const PipelineSchedule& s) {
  const TableIndex index = index_table(s);
  const double unit[4] = {1, 1, 1, 1};
  const Run run = run_table(s, index, unit);
  if (run.complete) return;
  std::ostringstream stuck;
  for (int64_t r = 0; r < s.ranks; ++r) {
    const size_t i = run.next[static_cast<size_t>(r)];
    if (i == s.steps[static_cast<size_t>(r)].size()) continue;
    const Position dep = *index.dependency(s.steps[static_cast<size_t>(r)][i]);
    stuck << "; " << where(s, r, static_cast<int64_t>(i)) << " waits for " << where(s, dep.rank, dep.index);
  }
  TITAN_CHECK(false, "schedule \"", s.name, "\" deadlocks", stuck.str());
}

ScheduleTiming simulate_schedule(const PipelineSchedule& s, double f, double b, double w) {
  const TableIndex index = index_table(s);
  const double cost[4] = {f, b + w, b, w};
  const Run run = run_table(s, index, cost);
  TITAN_CHECK(run.complete, "schedule \"", s.name, "\" deadlocks; validate_schedule names the steps");
  ScheduleTiming timing;
  timing.busy.assign(static_cast<size_t>(s.ranks), 0.0);
  for (size_t r = 0; r < run.end.size(); ++r)
    for (size_t i = 0; i < run.end[r].size(); ++i) {
      timing.busy[r] += run.end[r][i] - run.start[r][i];
      timing.makespan = std::max(timing.makespan, run.end[r][i]);
    }
  const double mean_busy = std::accumulate(timing.busy.begin(), timing.busy.end(), 0.0) / s.ranks;
  timing.bubble_fraction = timing.makespan > 0 ? 1 - mean_busy / timing.makespan : 0;
  return timing;
}

std::string format_schedule(const PipelineSchedule& s) {
  const TableIndex index = index_table(s);
  const double unit[4] = {1, 1, 1, 1};
  const Run run = run_table(s, index, unit);
  TITAN_CHECK(run.complete, "schedule \"", s.name, "\" deadlocks; validate_schedule names the steps");
  size_t slots = 0, width = 1;
  std::vector<std::vector<std::string>> grid(static_cast<size_t>(s.ranks));
  for (size_t r = 0; r < grid.size(); ++r)
    for (size_t i = 0; i < s.steps[r].size(); ++i) {
      const auto slot = static_cast<size_t>(run.start[r][i]);
      if (grid[r].size() <= slot) grid[r].resize(slot + 1, ".");
      grid[r][slot] = label(s.steps[r][i]);
      slots = std::max(slots, slot + 1);
      width = std::max(width, grid[r][slot].size());
    }
  std::ostringstream out;
  out << s.name << ": " << s.ranks << " ranks, " << s.micro_batches << " micro-batches, " << s.stages_per_rank
      << " stage(s) per rank\n";
  for (size_t r = 0; r < grid.size(); ++r) {
    grid[r].resize(slots, ".");
    std::string row = "rank " + std::to_string(r) + ":";
    for (const std::string& cell : grid[r]) row += " " + cell + std::string(width - cell.size(), ' ');
    while (!row.empty() && row.back() == ' ') row.pop_back();
    out << row << "\n";
  }
  return out.str();
}

AnalyticalBubble analytical_bubble(const PipelineSchedule& s) {
  const auto p = static_cast<double>(s.ranks), m = static_cast<double>(s.micro_batches);
  const auto v = static_cast<double>(s.stages_per_rank);
  if (s.name == "Interleaved1F1B") return {(p - 1) / (v * m + p - 1), "(p-1)/(v*m+p-1)"};
  // Each stage step costs one slot, three per micro-batch; only 1F1B's start-up (p-1)(f+b-w)
  // remains, the rest of 1F1B's bubble being filled by W.
  if (s.name == "ZBH1")
    return {(p - 1) / (3 * m + p - 1), "(p-1)/(3m+p-1), bubble (p-1)(f+b-w) over 3m work"};
  // Two stages per rank, 6m slots of work each; the last rank cannot start before p-1 forwards
  // have reached it, and ZB-V leaves no other bubble at f = b = w.
  if (s.name == "ZBVZeroBubble")
    return {(p - 1) / (6 * m + p - 1), "(p-1)/(6m+p-1), bubble (p-1)f over 6m work"};
  return {(p - 1) / (m + p - 1), "(p-1)/(m+p-1)"};
}

std::vector<int64_t> peak_in_flight(const PipelineSchedule& s) {
  std::vector<int64_t> peak(static_cast<size_t>(s.ranks), 0);
  for (size_t r = 0; r < peak.size() && r < s.steps.size(); ++r) {
    int64_t held = 0;
    for (const PipelineStep& st : s.steps[r]) {
      if (st.op == PipelineOp::forward) peak[r] = std::max(peak[r], ++held);
      if (is_backward(st.op)) --held;
    }
  }
  return peak;
}

std::string describe_schedule(const PipelineSchedule& s) {
  std::ostringstream out;
  const AnalyticalBubble published = analytical_bubble(s);
  out << s.name << " over " << s.ranks << " ranks, " << s.num_stages() << " stages (" << s.stages_per_rank
      << " per rank), " << s.micro_batches << " micro-batches; bubble " << simulate_schedule(s).bubble_fraction
      << " simulated with equal forward, input- and weight-gradient times, " << published.fraction
      << " published (" << published.formula << "); activations held per rank at most [";
  const std::vector<int64_t> peak = peak_in_flight(s);
  for (size_t r = 0; r < peak.size(); ++r) out << (r ? ", " : "") << peak[r];
  out << "]";
  return out.str();
}

}  // namespace titan::parallel
