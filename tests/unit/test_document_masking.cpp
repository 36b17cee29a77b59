// Packed documents kept apart by attention.document_masking: a document's logits in a packed row
// are those of the document run alone (RoPE sees only relative positions), for both families.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/test_util.h"
#include "titan/models/llama3/model.h"
#include "titan/models/qwen3/model.h"
#include "titan/train/config/job_config.h"
#include "titan/train/trainer.h"

namespace titan {
namespace {

namespace fs = std::filesystem;

Tensor row(const std::vector<int64_t>& ids) {
  return Tensor::from_vector(ids, {1, static_cast<int64_t>(ids.size())});
}

// Two documents of 5 and 11 tokens packed into one row of 16 (tiles of 4 so the boundary cuts a tile).
template <typename Model>
void expect_documents_stay_apart(Model& m) {
  const std::vector<int64_t> a = {1, 5, 2, 9, 3}, b = {7, 4, 4, 6, 0, 8, 2, 1, 3, 5, 9};
  std::vector<int64_t> packed = a, docs(a.size(), 0);
  packed.insert(packed.end(), b.begin(), b.end());
  docs.insert(docs.end(), b.size(), 1);
  Tensor doc_ids = Tensor::from_vector(std::vector<int32_t>(docs.begin(), docs.end()), {1, 16});

  Tensor together = m(row(packed), doc_ids);
  Tensor alone_a = m(row(a)), alone_b = m(row(b));
  EXPECT_TRUE(test::tensors_close(together.narrow(1, 0, 5), alone_a, 1e-4, "first document"));
  EXPECT_TRUE(test::tensors_close(together.narrow(1, 5, 11), alone_b, 1e-4, "second document"));
  // Without the ids the second document sees the first: its logits differ.
  EXPECT_FALSE(test::tensors_close(m(row(packed)).narrow(1, 5, 11), alone_b, 1e-4, "unmasked"));
}

TEST(DocumentMasking, Llama3DocumentsInAPackedRowMatchTheirSoloRuns) {
  models::llama3::ModelArgs a;
  a.dim = 32;
  a.n_layers = 2;
  a.n_heads = 4;
  a.n_kv_heads = 2;
  a.vocab_size = 11;
  a.multiple_of = 16;
  a.max_seq_len = 16;
  models::llama3::Transformer m(a, {}, {.splash = true, .block_q = 4, .block_kv = 4});
  Generator gen(3);
  m.init_weights(gen);
  expect_documents_stay_apart(m);

  models::llama3::Transformer reference(a, {}, {.splash = false, .block_q = 4, .block_kv = 4});
  EXPECT_TITAN_ERROR(reference(row({1, 2}), Tensor::from_vector(std::vector<int32_t>{0, 1}, {1, 2})),
                     "document masking needs splash attention");
}

TEST(DocumentMasking, Qwen3MoEDocumentsInAPackedRowMatchTheirSoloRuns) {
  models::qwen3::ModelArgs a = models::qwen3::flavor(models::qwen3::Family::moe, "debugmodel");
  a.vocab_size = 11;
  a.max_seq_len = 16;
  models::qwen3::Transformer m(a, {}, {.splash = true, .block_q = 4, .block_kv = 4});
  Generator gen(4);
  m.init_weights(gen);
  expect_documents_stay_apart(m);
}

TEST(DocumentMasking, TheTrainerFeedsTheLoadersDocumentIds) {
  const fs::path dir = fs::temp_directory_path() / ("titan_document_masking_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path text = dir / "corpus.txt";
  {
    std::ofstream f(text);
    for (int i = 0; i < 100; ++i) f << "Short document number " << i << ".\n\n";
  }
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> o = {"--training.dataset_path=" + text.string(), "--training.seq_len=64",
                                  "--training.local_batch_size=2", "--training.steps=2",
                                  "--lr_scheduler.warmup_steps=1", "--metrics.enable_jsonl=false",
                                  "--metrics.peak_flops=1e11", "--checkpoint.enable=false",
                                  "--attention.block_q=16", "--attention.block_kv=16",
                                  "--job.dump_folder=" + (dir / "out").string()};
    o.insert(o.end(), extra.begin(), extra.end());
    std::ostringstream log;
    train::Trainer t(train::load_job_config(std::string(TITAN_SOURCE_DIR) + "/configs/llama3/debug.toml", o), log);
    return t.train().losses;
  };
  std::vector<double> masked = run({"--attention.document_masking=true"}), plain = run({});
  ASSERT_EQ(masked.size(), 2u);
  // Windows hold several documents, so the mask changes what each token sees.
  EXPECT_NE(masked, plain);
  EXPECT_TITAN_ERROR(run({"--attention.document_masking=true", "--model.attention=reference"}),
                     "attention.document_masking = true needs model.attention = \"splash\"");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace titan
