#pragma once
// Graph mode's reading of the tensor-parallel plan (tp_styles.h): which dim of each parameter the
// plan splits over tp, by the parameter's name in the model. Nothing is narrowed and no hook is
// installed; the compiled step's shardings carry the split. The styles that only place
// collectives (norms, split regions) record nothing: the partitioner places those.
#include <map>
#include <optional>
#include <string>

#include "titan/parallel/tp_styles.h"

namespace titan::parallel {

class TpLayout final : public TpStyles {
 public:
  explicit TpLayout(int64_t degree);

  int64_t degree() const override { return degree_; }
  void colwise(nn::Linear& linear) override;
  void rowwise(nn::Linear& linear) override;
  void vocab_embedding(nn::Embedding& embedding) override;
  void vocab_output(nn::Linear& output) override;
  void tied_vocab_output(nn::Embedding&) override {}
  void enter_split_region(nn::Module&) override {}
  void norm(nn::Module&) override {}
  void partial_grads(nn::Module&) override {}
  void replicated_region(nn::Module&, nn::Module&) override {}

  // The dim of parameter `name` split over tp; nullopt for a replicated one.
  std::optional<int64_t> split_dim(const std::string& name) const;
  const std::map<std::string, int64_t>& splits() const { return splits_; }

 private:
  // Records that `m`'s parameter `local` splits along `dim`, which must divide by the degree.
  void split(const nn::Module& m, const std::string& local, const Tensor& p, int64_t dim);

  int64_t degree_;
  std::map<std::string, int64_t> splits_;
};

}  // namespace titan::parallel
