#pragma once
// Supervised fine-tuning data: JSONL rows {"prompt": ..., "completion": ...} (*.jsonl,
// *.jsonl.gz; the field names are [sft]'s), each an example tokenized as
//   [bos] prompt completion eos
// with the loss on the completion's tokens and the eos only (the prompt's tokens, and an example's
// first token, which nothing before it predicts, carry none). Prompt and completion are tokenized
// apart, so the boundary between them is exact.
//
// Packing is next-fit in file order: an example goes into the current row when it fits in what is
// left of it, else the row is padded out to seq_len and the example starts the next one. No
// example is split over rows and none is reordered, so the rows are a pure function of the data.
// Padding is eos tokens that carry no loss; under document masking each is a document of its own,
// so no example's token attends to it or to another example.
//
// The stream is the rows back to back and one padding token more: the loader's windows (seq_len + 1
// tokens from w * seq_len) are then exactly the rows, and a window's last label is the next row's
// first token, which never carries loss.
//
// Rows in chat form ("messages") are refused: titan renders no chat templates yet.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "titan/data/dataset.h"
#include "titan/data/tokenizer.h"

namespace titan::data {

enum class OverLength { truncate, skip, error };

struct SftOptions {
  DatasetOptions files = {};  // path, bad_data and path_key; its text keys are not read
  std::string prompt_field = "prompt";
  std::string completion_field = "completion";
  OverLength over_length = OverLength::truncate;
  bool packing = true;  // false: one example per row
  int64_t seq_len = 0;
};

struct SftStats {
  int64_t examples = 0;  // packed, truncated ones included
  int64_t truncated = 0;
  int64_t rows = 0;
  int64_t tokens = 0;       // of the examples, padding not counted
  int64_t loss_tokens = 0;  // labels that carry loss
};

// One example's ids, and which of them carry loss as labels.
struct SftExample {
  std::vector<int32_t> ids;
  std::vector<uint8_t> loss;
};
// [bos] prompt completion eos; throws when the tokenizer has no eos.
SftExample make_sft_example(std::span<const int32_t> prompt, std::span<const int32_t> completion,
                            const Tokenizer& tokenizer);

// Examples of at most seq_len tokens packed as the header says; `pad` fills rows.
struct SftPacked {
  std::vector<int32_t> ids;
  std::vector<uint8_t> loss;
  int64_t rows = 0;
};
SftPacked pack_sft_examples(std::span<const SftExample> examples, int64_t seq_len, bool packing, int32_t pad);

struct SftDataset {
  Dataset data;  // stream and loss mask; stats.documents counts the examples read
  SftStats sft;
};

// Bad rows (not JSON, a field missing or not a string, an empty completion) are errors naming the
// file and line, or skipped and counted (files.bad_data); over-long examples as over_length says.
SftDataset load_sft_dataset(const SftOptions& options, const Tokenizer& tokenizer);

}  // namespace titan::data
