#include "titan/train/objective_data.h"

#include <iomanip>
#include <sstream>

namespace titan::train {

ObjectiveData load_objective_data(const JobConfig& cfg, const data::DatasetOptions& options,
                                  const data::Tokenizer& tokenizer, int64_t seq_len) {
  if (cfg.training.objective != "sft") return {.dataset = data::load_dataset(options, tokenizer), .sft = {}};
  const data::SftConfig& s = cfg.sft;
  data::SftDataset sft =
      data::load_sft_dataset({.files = options,
                              .prompt_field = s.prompt_field,
                              .completion_field = s.completion_field,
                              .over_length = s.over_length == "skip"    ? data::OverLength::skip
                                             : s.over_length == "error" ? data::OverLength::error
                                                                        : data::OverLength::truncate,
                              .packing = s.packing,
                              .seq_len = seq_len},
                             tokenizer);
  return {.dataset = std::move(sft.data), .sft = sft.sft};
}

std::string describe_objective(const std::string& objective, const std::optional<data::SftStats>& sft,
                               const data::DatasetStats& stats, int64_t seq_len) {
  std::ostringstream out;
  out << "objective " << objective;
  if (!sft) return out.str();
  const double labels = static_cast<double>(sft->rows * seq_len);
  int64_t skipped = 0;
  for (const auto& [reason, n] : stats.skipped) skipped += n;
  out << ": " << sft->examples << " examples packed into " << sft->rows << " rows of " << seq_len
      << " tokens (" << sft->truncated << " truncated, " << skipped << " skipped), " << std::fixed
      << std::setprecision(1) << 100.0 * static_cast<double>(sft->loss_tokens) / labels
      << "% of the rows' labels carry loss";
  return out.str();
}

}  // namespace titan::train
